"""Which plan a ``POST /v1/runs`` names, and who signed it.

* **By name** (``workflow``, ``version``): with a trust policy, only what the store's definition registry
  recorded (signed, verified when loaded), the active version when ``version`` is left out; with no trust
  policy (development mode) any plan already submitted to the store under that name, the highest version
  when it is left out, recorded as ``unsigned``.
* **By signed bytes** (``definition``, ``signature``): only with a trust policy; the bytes are verified
  offline (:func:`sealflow.dsl.trust.verify.verify_bytes`), compiled, and recorded in the registry (which
  refuses a second digest for a recorded version and a rollback), exactly as ``sealflow run --trust`` does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sealflow.dsl.plan import Plan
from sealflow.server.problems import Problem
from sealflow.server.schemas import SubmitRequest
from sealflow.store.errors import NotFound

UNSIGNED = "unsigned"


@dataclasses.dataclass(frozen=True)
class Resolved:
    plan: Plan
    signer: str
    #: signed bytes posted with the request: recorded by ``Runtime.submit`` in the same transaction as the run
    source: Any = None


def resolve(rt: Any, body: SubmitRequest, trust: Any, actor: str) -> Resolved:
    """The plan ``body`` names (see the module docstring); a refusal is a :class:`Problem`."""
    if body.definition is not None or body.signature is not None:
        if body.workflow is not None or body.version is not None:
            raise Problem("invalid-request", "give either workflow (and version) or definition and signature")
        return _signed(rt, body, trust, actor)
    if body.workflow is None:
        raise Problem("invalid-request", "name the definition: workflow (and version), or definition and signature")
    if trust is not None:
        return _registered(rt, body.workflow, body.version)
    found = rt.plan_digests(body.workflow, body.version)
    if not found:
        raise Problem("not-found", f"no definition {_named(body.workflow, body.version)} was ever submitted to this "
                                   "store; submit it once with `sealflow submit FILE`")
    digest = max(found, key=lambda f: (f[1], f[2]))[0]
    return Resolved(rt.plan(digest), UNSIGNED)


def _named(name: str, version: int | None) -> str:
    return name if version is None else f"{name} v{version}"


def _registered(rt: Any, name: str, version: int | None) -> Resolved:
    records = [d for d in rt.definitions(name) if (d.version == version if version is not None else d.active)]
    if not records:
        raise Problem("not-found", f"no signed definition {_named(name, version)} is registered in this store; load it "
                                   "once with `sealflow submit --trust POLICY FILE` or POST its signed bytes")
    record = records[0]
    try:
        plan = rt.plan(record.digest)
    except NotFound:
        raise Problem("not-found", f"{name} v{record.version} is registered but its plan is not in this store; "
                                   "POST its signed bytes once") from None
    return Resolved(plan, record.signer)


def _signed(rt: Any, body: SubmitRequest, trust: Any, actor: str) -> Resolved:
    if trust is None:
        raise Problem("invalid-request", "this server has no trust policy (--trust), so it does not load definitions "
                                         "from signed bytes; submit by workflow name")
    if body.definition is None or body.signature is None:
        raise Problem("invalid-request", "a signed definition needs both definition and signature")
    from sealflow.dsl.trust.verify import verify_bytes
    from sealflow.store.definitions import DefinitionSource, called_registrations

    verified = verify_bytes(body.definition.encode(), "request:definition", body.signature.encode(), trust)
    plan = verified.plan if verified.plan.digest else verified.plan.with_digest()
    # nothing is written here: Runtime.submit authorises first, then records the definition, its bytes and
    # envelope with the run in one transaction (a refused request leaves nothing behind)
    source = DefinitionSource(verified.source, verified.envelope, verified.envelope_kind,
                              called=called_registrations(verified, None))
    return Resolved(plan, verified.principal(), source)
