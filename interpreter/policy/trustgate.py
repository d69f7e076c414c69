"""Which definitions a process executes: it verifies the stored signed bytes itself, with its own policy.

A run records the digest of the plan it executes, and the store keeps the exact definition bytes and
the signature envelope they were submitted with (:mod:`sealflow.store.definitions`). What
the submitter says about who signed (the run's ``signer``, verified against the *submitter's* trust
policy) is a claim, never a reason to execute: an attacker who may submit can sign with their own key
under any key id and pass a policy naming that key whatever they like.

A process that executes steps (a ``sealflow worker``) is configured with a :class:`TrustGate`. Before
the first step of a run whose plan digest it has not verified yet, the gate reads the stored bytes and
envelopes of that digest, verifies them against the gate's *own* :class:`~sealflow.dsl.trust.TrustPolicy`
(signature, expiry, namespace), compiles the same bytes and requires the compiled plan's digest, name
and version to be the run's. A verified digest is remembered for the life of the process. Otherwise
the step fails with ``unauthorized`` (never retried), the run goes to the dead-letter list with the
reason, a ``trust_refused`` event names the claimed signer and why, the worker logs it once per run,
and the version is marked *refused* in the registry: it is no longer the active or highest version,
so a forged version cannot turn the genuine one into a "rollback".

Runs of unsigned definitions are refused unless the gate allows them (``--allow-unsigned``). Without a
policy a gate cannot verify anything: it executes nothing but what ``allow_unsigned`` lets through
(then everything, as a development worker).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sealflow.core.outcomes import Failed
from sealflow.store.base import AuditEvent, RunRecord, Store

if TYPE_CHECKING:
    from sealflow.execution.context import Execution

UNSIGNED = "unsigned"

log = logging.getLogger("sealflow.trust")


class TrustGate:
    """The trust decision of one executing process (thread-safe; see the module docstring)."""

    def __init__(self, *, allow_unsigned: bool = False, policy: Any = None, actions: dict[str, Any] | None = None,
                 actor: str = "worker"):
        self.allow_unsigned = allow_unsigned
        #: the process's own sealflow.dsl.trust.TrustPolicy; None: nothing can be verified
        self.policy = policy
        self.actions = actions
        self.actor = actor
        self._verified: dict[str, str] = {}  # plan digest -> the signer this process verified
        self._logged: set[str] = set()
        self._lock = threading.Lock()

    def verified_signer(self, digest: str) -> str | None:
        """Who signed plan ``digest``, as this process verified it (None: not verified here)."""
        return self._verified.get(digest)

    def refusal(self, run: RunRecord, store: Store | None = None) -> str | None:
        """Why this process must not execute ``run`` (None: it may)."""
        signer = getattr(run, "signer", None) or UNSIGNED
        what = f"{run.workflow} v{run.workflow_version}"
        if signer == UNSIGNED:
            if self.allow_unsigned:
                return None
            return (f"run {run.id} executes an unsigned definition ({what}); this worker runs only signed "
                    "definitions: submit it with --trust POLICY, or start the worker with --allow-unsigned for "
                    "development")
        if self.policy is None:
            if self.allow_unsigned:
                return None
            return (f"run {run.id} executes {what}, claimed to be signed by {signer}, but this worker has no trust "
                    "policy to verify the signature with: start it with --trust POLICY")
        digest = run.plan_digest
        if digest in self._verified:
            return None
        if store is None:
            return f"run {run.id}: no store to read the signed definition of {what} from"
        reason, verified = self._verify(run, store)
        if verified is not None:
            with self._lock:
                self._verified[digest] = verified
            store.mark_definition(run.workflow, run.workflow_version, digest, refused=None, actor=self.actor,
                                  signer=verified)
            return None
        message = (f"run {run.id} executes {what} (plan {digest[:19]}...), claimed to be signed by {signer}; this "
                   f"worker's own trust policy refuses it: {reason}")
        store.mark_definition(run.workflow, run.workflow_version, digest, refused=reason, actor=self.actor)
        return message

    def _verify(self, run: RunRecord, store: Store) -> tuple[str, str | None]:
        """(why not, None) or ("", the verified signer) for the run's stored definition bytes."""
        from sealflow.dsl.trust import Refused, verify_bytes

        sources = [s for s in store.definition_sources(run.plan_digest) if s.envelope]
        if not sources:
            return ("the store holds no signed bytes for this plan (it was recorded without its source, e.g. "
                    "before this store kept them): submit the signed file again with --trust"), None
        refusals: list[str] = []
        for src in sources:
            label = f"{run.workflow}.v{run.workflow_version}.yaml (as stored)"
            envelope = src.envelope
            if envelope is None:  # (filtered out above; said again for the type checker)
                continue
            try:
                with _referenced_files(src.refs) as root:
                    v = verify_bytes(src.source, label, envelope, self.policy, actions=self.actions, root=root)
            except Refused as exc:
                refusals.append(f"[{exc.reason}] {exc.message}")
                continue
            if (v.digest, v.name, v.version) != (run.plan_digest, run.workflow, run.workflow_version):
                refusals.append(f"[tampered] the signed bytes compile to {v.name} v{v.version} ({v.digest[:19]}...), "
                                "not to the plan the run executes")
                continue
            return "", v.principal()
        return refusals[0] if len(set(refusals)) == 1 else "; ".join(dict.fromkeys(refusals)), None

    def log_once(self, run_id: str, message: str) -> None:
        with self._lock:
            if run_id in self._logged:
                return
            self._logged.add(run_id)
        log.warning("%s", message)


@contextlib.contextmanager
def _referenced_files(refs: dict[str, str] | None) -> Iterator[Path]:
    """A private folder holding the stored referenced files ($ref schemas, prompts), as the compile's root."""
    with tempfile.TemporaryDirectory(prefix="sealflow-refs-") as folder:
        root = Path(folder).resolve()
        for rel, text in (refs or {}).items():
            target = (root / rel).resolve()
            if not target.is_relative_to(root):  # the compile refuses such a path anyway; never write outside
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        yield root


def check(gate: TrustGate | None, x: Execution, run: RunRecord | None = None) -> Failed | None:
    """The refusal of the claimed attempt's run (or ``run``: a fan-out child is trusted as its parent run,
    whose verified plan it derives from) by ``gate`` (the process's trust gate), if there is one; a refusal
    is audited (``trust_refused``) and logged once per run."""
    if gate is None:
        return None
    services = getattr(x, "services", None)
    store = getattr(services, "store", None)
    now = services.clock.now() if services is not None else 0.0
    reason = gate.refusal(run or x.run, store)
    if reason is None:
        return None
    if store is not None:
        store.append_audit(AuditEvent("trust_refused", getattr(x, "step_id", None), gate.actor, run_id=x.run.id,
                                      detail={"signer": getattr(x.run, "signer", None) or UNSIGNED,
                                              "plan": x.run.plan_digest, "reason": reason}), now)
    gate.log_once(x.run.id, reason)
    return Failed("unauthorized", reason)
