"""Which commit opens an approval gate, and the deliveries it carries (one per channel that wants it).

The engine hands every commit it builds to :meth:`Notifier.amend` (after redaction): when the commit opens a
gate (an ``approval`` step or an agent's tool call waiting, a ``requires_approval_if`` gate scheduled, or a
gate re-opened on a changed payload) the commit gets one :class:`~sealflow.store.deliveries.NewDelivery`
per channel whose filters match, and the store writes them in the same transaction. A decision that only adds
an approval (same ``opened_at``) opens nothing. The payload says who must decide (the approvers, the quorum),
what (workflow, version, run, step, the payload's hash, a short summary; never the payload itself), until
when, and where (the link to the approvals page).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

from sealflow.engine.hooks import EngineHooks
from sealflow.engine.poison import OUTCOME_UNKNOWN
from sealflow.store.deliveries import NewDelivery
from sealflow.store.records import Commit, RunRecord

from .config import NotifyConfig

EVENT_TYPE = "approval.requested"
#: a lost attempt of an action that cannot deduplicate waits for a person (engine/poison.py)
UNKNOWN_EVENT_TYPE = "outcome_unknown.requested"


def iso(ts: float | None) -> str | None:
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def opened_gate(commit: Commit, before: dict[str, Any] | None) -> tuple[str, dict[str, Any], float | None] | None:
    """``(step id, gate data, expiry)`` of the gate ``commit`` opens (``before``: the attempt's data as read),
    else None."""
    nxt = commit.next
    if nxt is not None and nxt.state == "waiting" and "opened_at" in (nxt.data or {}):
        return nxt.step_id, nxt.data or {}, nxt.due_at
    step = commit.step
    if step is not None and step.state == "waiting" and step.data and "opened_at" in step.data \
            and step.data["opened_at"] != (before or {}).get("opened_at"):
        return step.step_id, step.data, step.due_at
    if step is not None and step.state == "waiting" and isinstance((step.data or {}).get(OUTCOME_UNKNOWN), dict) \
            and OUTCOME_UNKNOWN not in (before or {}):  # a lost attempt's outcome, for a person (engine/poison)
        return step.step_id, step.data or {}, step.due_at
    return None


def payload(config: NotifyConfig, run: RunRecord, step_id: str, data: dict[str, Any], due_at: float | None,
            now: float) -> dict[str, Any]:
    """The body every channel renders: ``{"type", "timestamp", "data"}`` (the Standard Webhooks shape)."""
    unknown = data.get(OUTCOME_UNKNOWN)
    if isinstance(unknown, dict):
        return _outcome_unknown(config, run, step_id, unknown, due_at, now)
    approvers = [str(a) for a in data.get("approvers") or ()]
    quorum = data.get("quorum") or 1
    reopened = bool(data.get("reopened"))
    summary = (f"{'Approval needed again (the payload changed)' if reopened else 'Approval needed'}: step "
               f"{step_id!r} of {run.workflow} v{run.workflow_version} (run {run.id}, tenant {run.tenant}, started "
               f"by {run.initiator}); {quorum} approval{'s' if quorum != 1 else ''} from "
               f"{', '.join(approvers) or 'the approvers'}" + (f", until {iso(due_at)}" if due_at else ""))
    return {"type": EVENT_TYPE, "timestamp": iso(now), "data": {
        "run_id": run.id, "workflow": run.workflow, "version": run.workflow_version, "tenant": run.tenant,
        "step": step_id, "initiator": run.initiator, "approvers": approvers, "quorum": quorum,
        "show_hash": data.get("show_hash"), "plan_digest": data.get("plan_digest"), "reopened": reopened,
        "opened_at": iso(data.get("opened_at")), "expires_at": iso(due_at), "summary": summary,
        "url": config.link(f"/ui/approvals#gate-{run.id}-{step_id}"), "run_url": config.link(f"/ui/runs/{run.id}")}}


def _outcome_unknown(config: NotifyConfig, run: RunRecord, step_id: str, gate: dict[str, Any], due_at: float | None,
                     now: float) -> dict[str, Any]:
    summary = (f"Decision needed: step {step_id!r} of {run.workflow} v{run.workflow_version} (run {run.id}, tenant "
               f"{run.tenant}) lost its attempt and its action {gate.get('action')} cannot deduplicate, so it may or "
               "may not have acted; a holder of runs:resolve decides retry, succeeded or failed"
               + (f", until {iso(due_at)}" if due_at else ""))
    return {"type": UNKNOWN_EVENT_TYPE, "timestamp": iso(now), "data": {
        "run_id": run.id, "workflow": run.workflow, "version": run.workflow_version, "tenant": run.tenant,
        "step": step_id, "initiator": run.initiator, "action": gate.get("action"), "lost": gate.get("lost"),
        "observed": gate.get("observed"), "opened_at": iso(gate.get("opened_at")), "expires_at": iso(due_at),
        "summary": summary, "run_url": config.link(f"/ui/runs/{run.id}")}}


@dataclasses.dataclass(frozen=True)
class Notifier(EngineHooks):
    """Adds a gate's deliveries to the commit that opens it: an engine middleware (an observer: a failure to build
    them is logged and the gate opens without them), in the runtime's engine configuration."""

    config: NotifyConfig
    name = "notifications"

    def before_commit(self, x: Any, commit: Commit) -> Commit:
        return self.amend(x.run, x.attempt.data, commit, x.now)

    def amend(self, run: RunRecord, before: dict[str, Any] | None, commit: Commit, now: float) -> Commit:
        gate = opened_gate(commit, before)
        if gate is None:
            return commit
        channels = [c for c in self.config.channels.values() if c.wants(run.workflow, run.tenant)]
        if not channels:
            return commit
        step_id, data, due_at = gate
        body = payload(self.config, run, step_id, data, due_at, now)
        rows = tuple(NewDelivery("ntf_" + uuid.uuid4().hex[:24], c.name, c.kind, step_id, run.tenant, body)
                     for c in channels)
        return dataclasses.replace(commit, notifications=commit.notifications + rows)
