"""What a reader of a run sees of each step beyond its state: its output, its attempts (when, how long, which
worker) and its model calls (the prompt file and version, the model that answered, tokens, cost, the repair).

Shown only to callers authorised to read the run (``status_json(..., traces=True)``: ``runs:read``, or its
initiator); redacted (:data:`~sealflow.core.redaction.REDACTOR`) and bounded: a value longer than
:data:`MAX_VALUE_CHARS` as JSON text is replaced by its first characters (``output_truncated``), a step keeps its
last :data:`MAX_ATTEMPTS` attempts and :data:`MAX_CALLS` model calls.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from sealflow.core.redaction import REDACTOR
from sealflow.store.audit import AuditLog
from sealflow.store.records import AttemptRecord

#: the longest step output (as JSON text) shown whole; a longer one is shown cut, with its length
MAX_VALUE_CHARS = 16_384
#: attempts listed per step (the latest), model calls per step (the latest)
MAX_ATTEMPTS = 20
MAX_CALLS = 50
#: the fields of a model call (``ai`` and ``agent`` steps' audited ``detail.calls``) a reader is shown
CALL_FIELDS = ("model", "provider_model", "prompt", "schema_digest", "max_tokens", "tokens", "cost_usd", "repair",
               "error")


def bounded(value: Any, limit: int = MAX_VALUE_CHARS) -> tuple[Any, dict[str, Any] | None]:
    """``value`` redacted, and None; or, when its JSON text is longer than ``limit``, None and what is shown
    instead (``{"chars": length, "preview": the first limit characters}``)."""
    value = REDACTOR.value(value)
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= limit:
        return value, None
    return None, {"chars": len(text), "preview": text[:limit]}


def attempt_view(a: AttemptRecord, worker: str | None) -> dict[str, Any]:
    """One attempt as a reader sees it: its number and try, state, when it started and ended, how long it took
    (seconds), the worker that claimed it (last) and how it failed."""
    out: dict[str, Any] = {"attempt": a.attempt, "try": a.try_no, "state": a.state, "started_at": a.started_at,
                           "ended_at": a.ended_at, "worker": a.lease_owner or worker}
    if a.started_at is not None and a.ended_at is not None:
        out["duration_s"] = round(max(0.0, a.ended_at - a.started_at), 6)
    if a.error_class:
        out["error"] = {"class": a.error_class, "message": a.error_message}
    return out


@dataclasses.dataclass
class ReaderDetail:
    """What the audit trail adds to a run's steps for its readers: model calls and the workers that claimed them."""

    #: step id -> its model calls, oldest first
    calls: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    #: step id -> (when, worker) of each claim of it, oldest first (the audited ``step.running``)
    claims: dict[str, list[tuple[float, str]]] = dataclasses.field(default_factory=dict)

    def worker(self, step_id: str, started_at: float | None, until: float | None) -> str | None:
        """The worker of the last claim of ``step_id`` from ``started_at`` until (before) ``until``."""
        found = None
        for at, actor in self.claims.get(step_id, ()):
            if started_at is not None and at >= started_at and (until is None or at < until):
                found = actor
        return found


def reader_detail(audit: AuditLog, run_id: str) -> ReaderDetail:
    """The run's model calls by step (the audited ``step.detail`` of its ``ai`` and ``agent`` attempts: each
    call's fields of :data:`CALL_FIELDS`, with ``answered_by``, the model the attempt reports answered, and ``at``,
    when its outcome was recorded) and who claimed each step when."""
    found = ReaderDetail()
    for event in audit.audit(run_id, event="step.running"):
        if event.step_id is not None:
            found.claims.setdefault(event.step_id, []).append((event.ts, event.actor))
    out = found.calls
    for event in audit.audit(run_id, event="step.detail"):
        detail = event.detail or {}
        agent = detail.get("agent")
        calls = detail.get("calls") or (agent.get("calls") if isinstance(agent, dict) else None)
        if event.step_id is None or not isinstance(calls, list):
            continue
        mine = out.setdefault(event.step_id, [])
        for call in calls:
            if isinstance(call, dict):
                entry = {k: call[k] for k in CALL_FIELDS if k in call}
                entry.update(answered_by=detail.get("model"), at=event.ts)
                mine.append(REDACTOR.value(entry))
        repair = detail.get("repair")
        if isinstance(repair, dict) and mine:
            mine[-1]["repair_detail"] = REDACTOR.value(repair)
        del mine[:-MAX_CALLS]
    return found


def add_detail(entry: dict[str, Any], attempts: list[AttemptRecord], detail: ReaderDetail) -> None:
    """Add to a step's ``entry`` what a reader of the run sees: its output (the latest attempt's, bounded), its
    attempts (the worker of each) and its model calls."""
    latest = attempts[-1]
    step_id = latest.step_id
    history = []
    for i, a in enumerate(attempts):
        until = attempts[i + 1].started_at if i + 1 < len(attempts) else None
        history.append(attempt_view(a, detail.worker(step_id, a.started_at, until)))
    if latest.output is not None:
        shown, cut = bounded(latest.output)
        if cut is None:
            entry["output"] = shown
        else:
            entry["output_truncated"] = cut
    entry["history"] = history[-MAX_ATTEMPTS:]
    if latest.started_at is not None:
        entry["started_at"] = latest.started_at
    if latest.ended_at is not None:
        entry["ended_at"] = latest.ended_at
    if latest.started_at is not None and latest.ended_at is not None:
        entry["duration_s"] = round(max(0.0, latest.ended_at - latest.started_at), 6)
    if history[-1]["worker"]:
        entry["worker"] = history[-1]["worker"]
    if detail.calls.get(step_id):
        entry["model_calls"] = detail.calls[step_id]
