"""What a run looks like to a caller: the run record, its attempts, and what it waits for."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from sealflow.core import states
from sealflow.core.ids import split_step_id
from sealflow.core.redaction import REDACTOR
from sealflow.engine.poison import OUTCOME_UNKNOWN
from sealflow.policy.approvals import EDIT, shown
from sealflow.runtime.stepview import ReaderDetail, add_detail
from sealflow.store.records import AttemptRecord, ChildRecord, RunRecord
from sealflow.store.runs import RunReads

#: child runs per page of ``status --json`` (``children.next_offset`` gives the next page)
CHILDREN_PAGE = 100


@dataclasses.dataclass
class RunStatus:
    """A run as the store has it now, with its attempts and what it waits for."""

    run: RunRecord
    attempts: list[AttemptRecord]
    waiting: dict[str, Any] | None = None
    #: fan-out steps: step id -> its latest attempt's items (``total``, ``counts`` by state, ``failures``)
    items: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    #: one page of the child runs (index order across steps), and where the next page starts (None: last)
    children: list[ChildRecord] = dataclasses.field(default_factory=list)
    children_offset: int = 0
    children_next: int | None = None
    #: reads what the audit trail adds for a reader of the run (model calls, workers), when it is shown: set by
    #: ``Runtime.status``, which authorised reading the run; None elsewhere (what answers another operation
    #: carries none of it)
    read_detail: Callable[[], ReaderDetail] | None = None
    #: the tags the run was submitted with (name -> value)
    tags: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def state(self) -> str:
        return self.run.state

    @property
    def output(self) -> Any:
        return self.run.output

    @property
    def error(self) -> tuple[str | None, str | None]:
        return self.run.error_class, self.run.error_message

    def step_states(self) -> dict[str, str]:
        """Step id -> state of its latest attempt."""
        return {a.step_id: a.state for a in self.attempts}

    def to_dict(self) -> dict[str, Any]:
        return {"run": dataclasses.asdict(self.run), "attempts": [dataclasses.asdict(a) for a in self.attempts],
                "waiting": self.waiting, "items": self.items,
                "children": [dataclasses.asdict(c) for c in self.children], "children_next": self.children_next}


def run_status(store: RunReads, run_id: str, *, children_offset: int = 0,
               children_limit: int = CHILDREN_PAGE) -> RunStatus:
    """The run as the store has it now; ``waiting`` says what holds it (an approval, a wait, a retry, its
    fan-out's child runs); a run that fans out carries its items' counts and a page of its child runs."""
    run = store.get_run(run_id)
    attempts = store.attempts(run_id)
    waiting = None
    active = next((a for a in attempts if a.state in states.STEP_ACTIVE), None)
    if active is not None and active.state in ("waiting", "retry_wait"):
        _, gate = split_step_id(active.step_id)
        kind = "approval" if gate or "opened_at" in active.data else ("retry" if active.state == "retry_wait"
                                                                     else "fanout" if "fanout" in active.data
                                                                     else "call" if "call" in active.data
                                                                     else "wait")
        limited = active.data.get("rate_limit") if active.state == "waiting" else None
        if isinstance(limited, dict):  # a model over its rate limit (policy/limits.py)
            kind = "rate_limit"
        waiting = {"step": active.step_id, "kind": kind, "due_at": active.due_at}
        if isinstance(limited, dict):
            waiting.update({k: limited.get(k) for k in ("model", "models", "reason")})
        if kind == "call":  # a called workflow's run: which, and where it is
            called = active.data["call"]
            kids = store.children(run.id, active.step_id, active.attempt)
            waiting.update(workflow=called.get("workflow"), version=called.get("version"),
                           child=kids[0].id if kids else None, child_state=kids[0].state if kids else None)
        if kind == "approval":
            waiting.update({k: active.data.get(k) for k in ("approvers", "quorum", "approvals", "plan_digest")})
            waiting["show"], waiting["show_hash"] = shown(active.data)  # (an approver's edit, if any)
            if isinstance(active.data.get(EDIT), dict):
                waiting["edited_by"] = active.data[EDIT].get("by")
        unknown = active.data.get(OUTCOME_UNKNOWN) if active.state == "waiting" else None
        if isinstance(unknown, dict):  # a lost attempt whose outcome a person decides (engine/poison.py)
            waiting.update(kind="outcome_unknown", action=unknown.get("action"), lost=unknown.get("lost"),
                           observed=unknown.get("observed"))
    status = RunStatus(run, attempts, waiting, tags=store.run_tags(run_id))
    if any("fanout" in (a.data or {}) for a in attempts):
        _fanout(store, status, children_offset, children_limit)
    return status


def _fanout(store: RunReads, status: RunStatus, offset: int, limit: int) -> None:
    """Items by state per fan-out step (its latest attempt), the failures listed, and a page of child runs."""
    latest = {a.step_id: a.attempt for a in status.attempts if "fanout" in (a.data or {})}
    counts = store.child_counts(status.run.id)
    for step_id, attempt in latest.items():
        mine = counts.get((step_id, attempt), {})
        failed = [c for c in store.children(status.run.id, step_id, attempt)
                  if c.state in states.RUN_FINAL and c.state != "completed"]
        status.items[step_id] = {"attempt": attempt, "total": sum(mine.values()), "counts": mine,
                                 "failures": [{"index": c.index, "run_id": c.id, "state": c.state,
                                               "error": {"class": c.error_class, "message": c.error_message}}
                                              for c in failed[:CHILDREN_PAGE]]}
    page = store.children(status.run.id, offset=offset, limit=limit + 1)
    status.children, status.children_offset = page[:limit], offset
    status.children_next = offset + limit if len(page) > limit else None


def _gate(data: dict[str, Any]) -> dict[str, Any]:
    """What an approver needs of a gate (opened or decided): what it showed (redacted), its binding, who
    may and who did decide."""
    value, value_hash = shown(data)
    return {"show": REDACTOR.value(value), "show_hash": value_hash,
            "approvers": data.get("approvers"), "quorum": data.get("quorum"),
            "approvals": [{"actor": a.get("actor"), "as": a.get("as")} for a in data.get("approvals", ())]}


def _steps(status: RunStatus, traces: bool) -> list[dict[str, Any]]:
    """One entry per step (gates included), in the order they first ran; a gate carries its ``approval``, a
    failure its attempt's traceback when ``traces`` (the caller may read the run) and the attempt kept one, and
    then too, when the status was read for a reader (``detail``), its output, attempts and model calls
    (:mod:`.stepview`)."""
    steps: dict[str, dict[str, Any]] = {}
    by_step: dict[str, list[AttemptRecord]] = {}
    for a in status.attempts:
        by_step.setdefault(a.step_id, []).append(a)
        entry = steps.setdefault(a.step_id, {"id": a.step_id, "state": a.state, "attempts": 0})
        entry["attempts"] = max(entry["attempts"], a.attempt)
        entry["state"] = a.state
        used = (a.data or {}).get("usage")
        if isinstance(used, dict):  # model steps: every attempt's tokens and cost
            mine = entry.setdefault("usage", {"tokens": 0, "cost_usd": 0.0})
            mine["tokens"] += int(used.get("tokens") or 0)
            mine["cost_usd"] = round(mine["cost_usd"] + float(used.get("cost_usd") or 0.0), 9)
        if "opened_at" in (a.data or {}):
            entry["approval"] = _gate(a.data)
        if a.step_id in status.items:
            entry["items"] = status.items[a.step_id]
        if a.error_class:
            entry["error"] = {"class": a.error_class, "message": a.error_message}
            if traces and a.error_trace:
                entry["error"]["trace"] = a.error_trace
        elif "error" in entry and a.state == "succeeded":
            del entry["error"]
    if traces and status.read_detail is not None:
        detail = status.read_detail()
        for step_id, entry in steps.items():
            add_detail(entry, by_step[step_id], detail)
    return list(steps.values())


def status_json(status: RunStatus, *, traces: bool = False) -> dict[str, Any]:
    """The run as one JSON object: what ``sealflow status --json`` prints and ``GET /v1/runs/{id}`` answers
    (docs/runtime.md names its fields); the input and what gates showed are redacted. ``traces``: a failed
    step's ``error`` carries the traceback its attempt kept (``error.trace``), for callers that were authorised
    to read the run (``runs:read``, or its initiator); never in what answers another operation (a cancel, an
    approval, a redrive), which a principal may do without reading the run."""
    run = status.run
    out = {"run_id": run.id, "state": run.state, "workflow": run.workflow, "version": run.workflow_version,
           "plan_digest": run.plan_digest, "tenant": run.tenant, "initiator": run.initiator,
           "input": REDACTOR.value(run.input), "output": run.output, "steps": _steps(status, traces)}
    if status.tags:
        out["tags"] = status.tags
    if run.signer:
        out["signer"] = run.signer
    if run.acting != run.initiator:
        out["acting_as"] = run.acting
    if run.access_mode:
        out["access"] = run.access_mode
    if run.error_class:
        out["error"] = {"class": run.error_class, "message": run.error_message}
    if status.waiting:
        out["waiting"] = dict(status.waiting, show=REDACTOR.value(status.waiting.get("show"))) \
            if "show" in status.waiting else status.waiting
    if run.parent_run_id is not None:
        out["parent"] = {"run_id": run.parent_run_id, "step": run.parent_step_id, "attempt": run.parent_attempt,
                         "index": run.item_index}
        out["item"] = REDACTOR.value(run.item)
    if status.children or status.children_offset:
        out["children"] = {"offset": status.children_offset, "next_offset": status.children_next,
                           "runs": [{"run_id": c.id, "index": c.index, "state": c.state,
                                     **({"error": {"class": c.error_class, "message": c.error_message}}
                                        if c.error_class else {})} for c in status.children]}
    out["usage"] = {"steps": run.steps_executed, "tokens": run.tokens, "cost_usd": run.cost_usd,
                    "tool_calls": run.tool_calls}
    return out
