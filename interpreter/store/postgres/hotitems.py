"""The hot path's items (:mod:`.hotsql`): which changes go that way, what each sends, what its answer means.

For each kind, ``*_item`` builds the item the database function reads (its audit events included, as
:meth:`SqliteChain.bodies` gives them: the content hashed here, linked by the database) and ``*_result`` turns
an ``ok`` answer into what the shared code returns for the same change. The events are the shared code's
(:mod:`sealflow.store.sql.steps`, ``store.py``), built here in its order; a test compares the two
ways row by row, audit chain included.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sealflow.core import states
from sealflow.core.clock import day_of
from sealflow.core.ids import StepRef, StepRole
from sealflow.store.auditchain import output_summary
from sealflow.store.records import (
    AttemptRecord,
    Claimed,
    Commit,
    Committed,
    LazyResults,
    Message,
    NewRun,
    RunRecord,
)
from sealflow.store.sql import reservations, rows

dumps = rows.dumps

#: an item sent to the database function, or its answer (JSON objects)
Item = dict[str, Any]
#: a run's results read when first used (:class:`LazyResults`)
ResultsLoader = Callable[[frozenset[str] | None], dict[str, tuple[str, str | None]]]

#: the places of a run's (rows.RUN_COLS), its changing columns' (rows.RUN_CHANGING) and an attempt's
#: (rows.ATTEMPT_COLS) floating-point columns: a whole number comes back from the database's JSON as an int
_RUN_FLOATS, _CHANGING_FLOATS, _ATTEMPT_FLOATS = (11, 12, 13, 19), (2, 3, 9), (7, 9, 10, 11, 12)


def _floats(values: list[Any], at: tuple[int, ...]) -> list[Any]:
    for i in at:
        if values[i] is not None:
            values[i] = float(values[i])
    return values


# -- a commit: carry (the next step claimed) or end (the run final) -------------------------------------------

def commit_kind(commit: Commit) -> str | None:
    """``"carry"`` or ``"end"`` when the hot path writes all of ``commit``, else None (the shared way).

    Both: the engine's view to check against (``seen``) of a plainly running top-level run, whose running
    attempt ends (a final state, no timer) holding no lock or pool slot, with nothing else to write (no dead
    letter, children, fan-out, notifications, traceback: an action's exception goes the shared way). ``carry``:
    the run's next step, a first try due now, is claimed for the committing worker (``claim_as``). ``end``: no
    next step, and the run goes final (``completed``, or ``failed`` without a dead letter: a fan-out child's,
    which is excluded here anyway)."""
    step, nxt, seen, ch = commit.step, commit.next, commit.seen, commit.run
    if seen is None or step is None or seen[0] != "running" or seen[2] is not None or seen[3] != "running" \
            or step.state not in states.STEP_FINAL or step.timer_kind is not None or step.due_at is not None \
            or commit.dead_letter is not None or commit.spawn is not None or commit.close_fanout \
            or commit.undo_children or commit.undo_seen is not None or commit.notifications or commit.holds_slots \
            or step.error_trace is not None or not states.step_can("running", step.state):
        return None
    if nxt is None:
        return "end" if ch.state == "completed" else None
    if commit.claim_as is None or commit.carry_from is None or commit.carry_from.id != commit.run_id \
            or ch.state not in (None, "running") or not commit.dispatch_inline or nxt.state != "scheduled" \
            or nxt.try_no != 1 or nxt.timer_kind is not None or StepRef.parse(nxt.step_id).role is not StepRole.STEP:
        return None
    return "carry"


def _step_end(commit: Commit, now: float) -> Item:
    step, ch, seen, led = commit.step, commit.run, commit.seen, commit.ledger
    assert step is not None and seen is not None
    charged = bool(ch.add_tokens or ch.add_cost_usd)
    item = {"run": commit.run_id, "step": step.step_id, "att": step.attempt, "tok": step.token,
            "s_state": seen[0], "s_rev": commit.expected_rev, "s_astate": seen[3], "s_tenant": seen[1],
            "s_parent": seen[2], "now": now,
            "a_state": step.state, "a_out": step.output_json, "a_ec": step.error_class, "a_em": step.error_message,
            "a_data": None if step.data is None else dumps(step.data),
            "a_res": StepRef.parse(step.step_id).role is StepRole.STEP,
            "r_out": ch.output_json, "r_ec": ch.error_class, "r_em": ch.error_message, "r_steps": ch.add_steps,
            "r_tok": ch.add_tokens, "r_cost": ch.add_cost_usd, "r_tools": ch.add_tool_calls,
            "day": day_of(now) if charged else None,
            "v_key": reservations.key_of(commit.run_id, step.step_id, step.attempt) if commit.holds_reservation
            else None}
    if led is not None:
        item.update(l_tenant=led.tenant, l_key=led.key, l_run=led.run_id, l_step=led.step_id, l_res=led.result_json)
    return item


def commit_events(commit: Commit, now: float) -> list[tuple[Any, ...]]:
    """The audit events the shared code queues for ``commit`` (``SqlStore._commit_checked``), in its order:
    the step's end; then the next attempt scheduled and claimed in one row (carry) or the run's move (end);
    then the commit's own events."""
    step, nxt, run_id, actor = commit.step, commit.next, commit.run_id, commit.actor
    assert step is not None
    detail = {"error_class": step.error_class, "message": step.error_message} if step.error_class else None
    out: list[tuple[Any, ...]] = [(run_id, step.step_id, "step." + step.state, actor, "running", step.state,
                         None if detail is None else dumps(detail), now,
                         None if step.output_json is None else {"summary": output_summary(step.output_json)})]
    if nxt is not None:
        out.append((run_id, nxt.step_id, "step.running", commit.claim_as, "pending", "running",
                    dumps({"scheduled_by": actor}), now, None))
    else:
        ch = commit.run
        moved = {"error_class": ch.error_class, "message": ch.error_message} if ch.error_class else None
        out.append((run_id, None, "run." + str(ch.state), actor, "running", ch.state,
                    None if moved is None else dumps(moved), now, None))
    for ev in commit.audit:
        out.append((run_id, ev.step_id, ev.event, ev.actor, ev.state_before, ev.state_after,
                    None if ev.detail is None else dumps(ev.detail), now, ev.chain_fields()))
    return out


def _due(due_at: float | None, shift: float) -> float | None:
    return None if due_at is None else due_at + shift


def carry_item(commit: Commit, now: float, token: int, lease_expires: float, events: list[list[Any]],
               shift: float = 0.0) -> Item:
    """A carry (``token``: the next attempt's before its claim, which makes it ``token + 1``; ``shift``: from
    the caller's clock to the database's, added to the due time the caller computed, as
    ``dbclock._shifted_commit`` does on the shared way)."""
    nxt = commit.next
    assert nxt is not None
    item = _step_end(commit, now)
    item.update(k="carry", n_step=nxt.step_id, n_try=nxt.try_no, n_tok=token + 1, owner=commit.claim_as,
                n_lexp=lease_expires, n_lms=nxt.lease_ms, n_due=_due(nxt.due_at, shift),
                n_data=None if nxt.data is None else dumps(nxt.data), ev=events)
    return item


def end_item(commit: Commit, now: float, events: list[list[Any]]) -> Item:
    item = _step_end(commit, now)
    item.update(k="end", r_state=commit.run.state, ev=events)
    return item


def fence_found(answer: Item) -> tuple[Any, ...] | None:
    """What the store holds (``SqlStore._check_fence``'s ``got``) from a ``fence`` answer; None: no run."""
    found = answer.get("f")
    return None if found is None else tuple(found)


def carry_result(commit: Commit, answer: Item, now: float, token: int, lease_expires: float,
                 results: ResultsLoader, shift: float = 0.0) -> Committed:
    """What the shared code returns for a carry: the next attempt claimed, the run read back."""
    nxt, base = commit.next, commit.carry_from
    assert nxt is not None and base is not None
    number, changing = answer["n"], _floats(answer["r"], _CHANGING_FLOATS)
    data = {} if nxt.data is None else json.loads(dumps(nxt.data))
    att = AttemptRecord(commit.run_id, nxt.step_id, number, nxt.try_no, "running", token + 1, commit.claim_as,
                        lease_expires, nxt.lease_ms, now, now, None, _due(nxt.due_at, shift), None, None, None, data,
                        0)
    run = rows.run_over(base, changing)
    claimed = Claimed(run, att, LazyResults(results))
    return Committed(changing[1], run.state, (Message(commit.run_id, nxt.step_id, number, token, base.tenant),),
                     claimed)


def end_result(answer: Item) -> Committed:
    changing = _floats(answer["r"], _CHANGING_FLOATS)
    return Committed(changing[1], changing[0])


# -- a claim of a message's attempt -----------------------------------------------------------------------

def claim_item(run_id: str, step_id: str, attempt: int, token: int, tenant: str, owner: str, now: float,
               events_queued: list[list[Any]], events_running: list[list[Any]]) -> Item:
    """A claim of a ``scheduled`` attempt of a ``queued`` or ``running`` run (anything else: ``general``).
    ``events_queued``: its events when the run was queued (it moves to running too), else ``events_running``."""
    return {"k": "claim", "run": run_id, "step": step_id, "att": attempt, "tok": token, "tenant": tenant,
            "owner": owner, "now": now, "ev": events_queued, "ev_r": events_running}


def claim_events(run_id: str, step_id: str, owner: str, now: float
                 ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The events of a claim (``SqlStore._take``): when the run was queued, and when it was running."""
    step = (run_id, step_id, "step.running", owner, "scheduled", "running", None, now, None)
    return [step, (run_id, None, "run.running", owner, "queued", "running", None, now, None)], [step]


def claim_result(answer: Item, results: ResultsLoader) -> Claimed:
    return Claimed(rows.run(_floats(answer["r"], _RUN_FLOATS)), rows.attempt(_floats(answer["a"], _ATTEMPT_FLOATS)),
                   LazyResults(results))


# -- a submit ---------------------------------------------------------------------------------------------

def submit_events(new: NewRun, now: float) -> list[tuple[Any, ...]]:
    """The events of a submit (``SqlStore._submit``): created, queued, its first step scheduled."""
    created = {"workflow": new.workflow, "version": new.workflow_version, "plan": new.plan_digest,
               "tenant": new.tenant, "idempotency_key": new.idempotency_key,
               **({"acting_as": new.acting_as} if new.acting_as not in (None, new.initiator) else {}),
               **({"access": new.access_mode} if new.access_mode else {}),
               **({"signer": new.signer} if new.signer else {})}
    return [(new.id, None, "run.created", new.initiator, None, "created", dumps(created), now, None),
            (new.id, None, "run.queued", new.initiator, "created", "queued", None, now, None),
            (new.id, new.first_step, "step.scheduled", "system", "pending", "scheduled", None, now, None)]


def submit_item(new: NewRun, now: float, token: int, plan_known: bool, events: list[list[Any]]) -> Item:
    """A submit (``plan_known``: this process stored the plan before, so its body is not sent again; should it
    be gone, the run's insert fails on its reference and the submit goes the shared way, plan included)."""
    return {"k": "submit", "id": new.id, "tenant": new.tenant, "workflow": new.workflow,
            "version": new.workflow_version, "digest": new.plan_digest, "plan": None if plan_known else new.plan_json,
            "input": new.input_json, "initiator": new.initiator, "ikey": new.idempotency_key,
            "ihash": new.input_hash, "now": now, "deadline": new.deadline, "first": new.first_step,
            "lms": new.first_lease_ms, "priority": new.priority, "acting": new.acting_as,
            "access": new.access_mode, "signer": new.signer, "tok": token, "ev": events}


def submit_result(new: NewRun, now: float) -> RunRecord:
    """The run as the shared code's insert gives it back (every other column at its default)."""
    return RunRecord(new.id, new.tenant, new.workflow, new.workflow_version, new.plan_digest,
                     json.loads(new.input_json), "queued", 1, new.initiator, new.idempotency_key, new.input_hash,
                     now, now, new.deadline, None, None, None, 0, 0, 0.0, 0, 0, new.first_step, 1, new.priority,
                     new.acting_as, new.access_mode, new.signer, None, None, None, None, None)


def remember(chain: Any, run: RunRecord | NewRun) -> None:
    """Cache the run's chain fields in ``chain`` (its events are hashed here, before the run is read back)."""
    chain.remember_run(run.id, run.tenant, run.workflow, run.workflow_version, run.plan_digest)
