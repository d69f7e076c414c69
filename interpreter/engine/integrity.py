"""A stored plan is executed only if it is what its digest says; a run whose plan is not is refused once.

A run names its plan by digest (sha256 of the plan's canonical JSON) and the store keeps the plan's JSON in
its ``plans`` table. :func:`load_plan` reads that row and requires it to be a plan whose recorded digest is
the one asked for *and* the hash of its content; otherwise :class:`~sealflow.store.errors.PlanTampered`
(a row edited in the database, another plan swapped in under the digest, a torn or corrupted write).

What that costs the run (:func:`refuse`, called by the engine for the step message that found it): the
attempt is claimed (without lock or pool slots: they are the plan's, which is not to be believed) and failed
with ``unauthorized`` (never retried), the run fails into the dead-letter list with the reason (``[tampered]
...``), and ``trust_refused`` is audited with the plan's digest and why, as the trust gate
(:mod:`sealflow.policy.trustgate`) refuses a run whose signed bytes do not compile to its plan.
Nothing of the plan is used: no ``on_error`` route is taken and no compensation runs (they would come from
the plan). Before this, the exception escaped the engine, the message came back, and the step was tried again
for ever. A fan-out child run fails without a dead letter, as any child does (its parent step handles it).
"""

from __future__ import annotations

import logging
from typing import Any

from sealflow.core.fingerprints import fingerprint
from sealflow.dsl.plan import Plan
from sealflow.engine.committing import commit_retrying
from sealflow.store.base import AuditEvent, Commit, DeadLetterSpec, RunChange, StepChange
from sealflow.store.errors import ClaimDeferred, MessageRefused, PlanTampered
from sealflow.store.records import Committed

log = logging.getLogger("sealflow.engine")

ERROR_CLASS = "unauthorized"
EVENT = "trust_refused"


def load_plan(store: Any, digest: str) -> Plan:
    """The plan stored under ``digest``, checked: :class:`PlanTampered` when the row is not that plan."""
    text = store.get_plan(digest)
    try:
        plan = Plan.from_json(text)  # (it recomputes the digest and compares it with the one recorded inside)
    except ValueError as exc:  # a digest mismatch, JSON that does not parse, a body that is not a plan
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        computed = why.partition("computed ")[2] if why.startswith("plan digest mismatch") else ""
        raise PlanTampered(digest, f"its content hashes to {computed}" if computed else
                           f"the row is not a plan: {why}") from None
    if plan.digest != digest:
        raise PlanTampered(digest, f"the row holds another plan, {plan.digest or 'one without a digest'}")
    return plan


def refuse(store: Any, clock: Any, exc: PlanTampered, run_id: str, step_id: str, attempt: int, token: int,
           tenant: str | None, *, owner: str, actor: str, running_limit: Any = None) -> tuple[Committed | None, Any]:
    """Claim the attempt this message names and fail it, and its run, for its tampered plan (see the module
    docstring): the commit made (None: nothing was, the message was stale or put off) and the run as claimed."""
    try:  # no slots: the plan that would name them is not to be believed
        claimed = store.claim(run_id, step_id, attempt, token, tenant or "", owner=owner, now=clock.now(),
                              running_limit=running_limit, slots=lambda *_: (), slotless=True)
    except MessageRefused as refused:  # stale, duplicate, forged: audited by the store, as any such message
        log.info("%s", refused)
        return None, None
    except ClaimDeferred:  # a bulkhead is full: the message comes back, and is refused then
        return None, None
    att = claimed.attempt
    state = {"run": claimed.run}
    reason = (f"[tampered] run {run_id} ({claimed.run.workflow} v{claimed.run.workflow_version}) was not executed: "
              f"{exc}; restore that row from a backup (or delete it and submit the definition again), then "
              f"`sealflow dlq redrive {run_id}`")

    def build() -> Commit:
        run = state["run"]
        cancelling = run.state == "cancelling"  # the operator's cancel stands: cancelled, not dead-lettered
        dead = None if cancelling or run.parent_run_id is not None else DeadLetterSpec(
            att.step_id, f"step {att.step_id!r} failed with {ERROR_CLASS}: {reason}", ERROR_CLASS,
            fingerprint(att.step_id, ERROR_CLASS, reason))
        event = AuditEvent(EVENT, att.step_id, actor, detail={
            "signer": getattr(run, "signer", None) or "unsigned", "plan": run.plan_digest, "reason": reason})
        return Commit(run_id=run.id, expected_rev=run.rev,
                      step=StepChange(att.step_id, att.attempt, att.token, "failed", error_class=ERROR_CLASS,
                                      error_message=reason),
                      run=RunChange(state="cancelled" if cancelling else "failed",
                                    error_class=None if cancelling else ERROR_CLASS,
                                    error_message=None if cancelling else reason),
                      dead_letter=dead, audit=(event,), actor=actor)

    def conflict() -> None:
        state["run"] = store.get_run(run_id)

    log.error("%s", reason)
    return commit_retrying(store, clock, build, conflict=conflict,
                           fenced=lambda fenced: log.warning("%s", fenced),
                           illegal=lambda illegal: log.error("%s", illegal),
                           gave_up=f"run {run_id} kept changing while its tampered plan was refused; try again"), \
        claimed.run
