"""Helpers for the security tests: an access policy file that tests rewrite, and runtimes under it.

    policy = PolicyFile(tmp_path / "access.yaml")       # written with ACME
    rt = secured_runtime(tmp_path, registry, clock, policy)
    policy.revoke("user:alice", "buyer")                 # takes effect at the next check
"""

from __future__ import annotations

import copy
import random
from pathlib import Path

import pytest
import yaml

from sealflow.policy.access import FileAccess
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store

#: acme: alice buys (and may approve nothing), bob and cy are managers, dan is finance, ida audits (reads runs,
#: audit trails and dead letters), ops operates (cancels, redrives); globex: a second tenant with its own manager,
#: eve
ACME = {
    "acme": {
        "roles": {"buyer": ["billing:charge", "crm:read"], "manager": ["crm:read"], "finance": ["billing:*"],
                  "auditor": ["runs:read", "audit:read", "dlq:read"], "ops": ["runs:*", "dlq:*", "audit:read"]},
        "members": {"user:alice": ["buyer"], "user:bob": ["manager"], "user:cy": ["manager"],
                    "user:dan": ["finance"], "service:nightly": ["buyer"], "user:ida": ["auditor"],
                    "user:ops": ["ops"]},
    },
    "globex": {
        "roles": {"buyer": ["billing:charge", "crm:read"], "manager": ["crm:read"]},
        "members": {"user:eve": ["buyer", "manager"], "user:gus": ["manager"]},
    },
}


class PolicyFile:
    """An access policy file a test edits while runs are in flight."""

    def __init__(self, path: Path, tenants: dict | None = None):
        self.path = Path(path)
        self.tenants = copy.deepcopy(ACME if tenants is None else tenants)
        self.save()

    def save(self) -> None:
        self.path.write_text(yaml.safe_dump({"tenants": self.tenants}, sort_keys=False))

    def revoke(self, principal: str, role: str, tenant: str = "acme") -> None:
        held = self.tenants[tenant]["members"][principal]
        held.remove(role)
        if not held:
            del self.tenants[tenant]["members"][principal]
        self.save()

    def grant(self, principal: str, role: str, tenant: str = "acme") -> None:
        self.tenants[tenant]["members"].setdefault(principal, []).append(role)
        self.save()


def secured_runtime(tmp_path: Path, registry, clock, policy: PolicyFile, *, name: str = "secure.db",
                    **kw) -> Runtime:
    return Runtime(open_store(f"sqlite:///{tmp_path}/{name}", clock=clock), registry, {}, rng=random.Random(7),
                   worker_timeout_ms=20, access=FileAccess(policy.path), **kw)


def events(rt: Runtime, name: str, run_id: str | None = "*") -> list:
    """Audit events called ``name`` (of one run, of none with ``run_id=None``, or of all with ``"*"``)."""
    found = rt.store.audit(None)
    return [e for e in found if e.event == name and (run_id == "*" or e.run_id == run_id)]


@pytest.fixture
def policy(tmp_path):
    """An access policy file the test rewrites (the runtime re-reads it at each decision)."""
    return PolicyFile(tmp_path / "access.yaml")


@pytest.fixture
def rt(tmp_path, registry, clock, policy):
    """A runtime under ``policy`` (not open development mode)."""
    runtime = secured_runtime(tmp_path, registry, clock, policy)
    yield runtime
    runtime.close()
    runtime.store.close()
