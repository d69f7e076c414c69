"""The conformance kit's helpers: a new run, a submitted and claimed one, a commit that succeeds and goes on, a
snapshot of what a run holds. The repository's own store tests use them too."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sealflow.store.records import Commit, NewRun, NextAttempt, RunChange, StepChange

if TYPE_CHECKING:
    from sealflow.core.clock import FakeClock
    from sealflow.store.base import Store
    from sealflow.store.records import Claimed, Message

#: the time the kit's runs are stamped with (the start of a default FakeClock)
T0 = 1_700_000_000.0


def new_run(run_id: str = "r1", *, key: str | None = None, value: Any = None, deadline: float | None = None,
            tenant: str = "default", first: str = "a") -> NewRun:
    value = {"n": 1} if value is None else value
    return NewRun(id=run_id, tenant=tenant, workflow="wf", workflow_version=1, plan_digest="sha256:plan",
                  plan_json='{"plan": true}', input_json=json.dumps(value),
                  input_hash=json.dumps(value, sort_keys=True),
                  initiator="user:ana", idempotency_key=key, deadline=deadline, first_step=first, first_lease_ms=30_000)


def submit_and_claim(store: Store, run_id: str = "r1", now: float = T0) -> tuple[Claimed, Message]:
    store.submit(new_run(run_id), now)
    (msg,) = store.take_outbox(now)
    return store.claim(*msg, owner="w1", now=now), msg


def succeed_and_go(claimed: Claimed, next_step: str | None = "b", *, state: str | None = None, ledger: Any = None,
                   dead: Any = None, now: float = T0, rev: int | None = None) -> Commit:
    att = claimed.attempt
    return Commit(
        run_id=att.run_id, expected_rev=claimed.run.rev if rev is None else rev,
        step=StepChange(att.step_id, att.attempt, att.token, "succeeded", output_json='{"ok":true}'),
        run=RunChange(state=state, add_steps=1), ledger=ledger, dead_letter=dead,
        next=NextAttempt(next_step, 1, "scheduled", now, 30_000) if next_step else None, dispatch_inline=True)


def snapshot(store: Store, run_id: str) -> tuple[Any, ...]:
    return (store.get_run(run_id), store.attempts(run_id), store.outbox(run_id), store.timers(run_id),
            store.audit(run_id), store.dead_letter(run_id))


def at(clock: FakeClock, when: float) -> None:
    """Move the fake ``clock`` the store was opened on forward to ``when`` (never back)."""
    clock.advance(when - clock.now())
