"""The store contract for lease slots (locks and pools), run against every backend (the ``store`` fixture).

Given / When / Then in each test; everything goes through the :class:`Store` interface.
"""

from __future__ import annotations

import pytest
from test_store_suite import T0, new_run, succeed_and_go

from sealflow.store import ClaimDeferred, Commit, RunChange, StepChange
from sealflow.store.coordination import RECHECK_S, SlotRequest, SlotsBusy


def needs(*requests):
    return lambda run, att, results: requests


def submit_all(store, *run_ids, now=T0):
    for run_id in run_ids:
        store.submit(new_run(run_id), now)
    got = {m.run_id: m for m in store.take_outbox(now)}
    return [got[r] for r in run_ids]


def claim(store, msg, *requests, now=T0, owner="w1"):
    return store.claim(*msg, owner=owner, now=now, slots=needs(*requests))


def test_a_lock_has_one_holder_with_a_growing_fencing_token(store):
    # Given two runs whose first steps need lock:res
    m1, m2 = submit_all(store, "r1", "r2")
    lock = SlotRequest("lock:res")
    # When the first claims / Then it holds the lock with fencing token 1
    first = claim(store, m1, lock)
    assert [(g.name, g.fence) for g in first.grants] == [("lock:res", 1)]
    # When the second claims / Then it waits (a ClaimDeferred, the attempt still scheduled)
    with pytest.raises(SlotsBusy) as got:
        claim(store, m2, lock)
    assert isinstance(got.value, ClaimDeferred) and got.value.position == 0
    assert store.attempts("r2")[0].state == "scheduled"
    # ... durably: its outbox row is due again, at the latest when the holder's lease ends
    (row,) = store.outbox("r2")
    assert row.sent_at is None and T0 < row.due_at <= first.attempt.lease_expires + 0.1
    assert [(h.run_id, h.fence, h.position) for h in store.slots(T0, "lock:res")] == [("r1", 1, None), ("r2", None, 0)]
    # When the holder commits / Then the waiter's row is due at once, and its claim gets token 2
    store.commit(succeed_and_go(first, None, state="completed"), T0 + 1)
    (row,) = store.outbox("r2")
    assert row.due_at == pytest.approx(T0 + 1)
    second = claim(store, m2, lock, now=T0 + 1)
    assert [g.fence for g in second.grants] == [2]


def test_a_dead_holder_gives_the_lock_back_when_its_lease_ends(store):
    # Given a holder that never commits (its worker was SIGKILLed)
    m1, m2 = submit_all(store, "r1", "r2")
    lock = SlotRequest("lock:res")
    first = claim(store, m1, lock)
    with pytest.raises(SlotsBusy):
        claim(store, m2, lock, now=T0 + 1)
    # When its lease has passed (no sweep yet) / Then the waiter takes the lock, with a higher token
    later = first.attempt.lease_expires + 0.5
    second = claim(store, m2, lock, now=later)
    assert [g.fence for g in second.grants] == [2]
    # And a late commit of the dead holder is fenced off by its attempt token as before
    from sealflow.store import FencingError

    store.sweep(later)
    with pytest.raises(FencingError):
        store.commit(succeed_and_go(first, None, state="completed"), later)


def test_a_pool_admits_its_limit_and_waiters_go_in_arrival_order(store):
    # Given a pool of 2 and four runs arriving in order
    pool = SlotRequest("pool:email", 2)
    msgs = submit_all(store, "r1", "r2", "r3", "r4")
    held = [claim(store, msgs[0], pool), claim(store, msgs[1], pool)]
    for i, m in enumerate(msgs[2:]):
        with pytest.raises(SlotsBusy) as got:
            claim(store, m, pool, now=T0 + i)
        assert got.value.position == i
    # When r4 is offered a slot before r3 (its message came first) / Then it still waits behind r3
    store.commit(succeed_and_go(held[0], None, state="completed"), T0 + 5)
    with pytest.raises(SlotsBusy) as got:
        claim(store, msgs[3], pool, now=T0 + 5)
    assert got.value.position == 1
    # And r3 gets the freed slot; the pool never has more than 2 holders
    assert claim(store, msgs[2], pool, now=T0 + 5).grants
    holders = [h for h in store.slots(T0 + 5, "pool:email") if h.fence is not None]
    assert sorted(h.run_id for h in holders) == ["r2", "r3"]


def test_a_step_with_a_lock_and_a_pool_takes_both_or_neither(store):
    # Given lock:a free and pool:p (limit 1) taken
    m1, m2 = submit_all(store, "r1", "r2")
    claim(store, m1, SlotRequest("pool:p"))
    # When r2 needs both / Then it waits and holds neither
    with pytest.raises(SlotsBusy):
        claim(store, m2, SlotRequest("lock:a"), SlotRequest("pool:p"))
    assert [h.run_id for h in store.slots(T0, "lock:a")] == []


def test_a_run_slot_is_held_from_the_first_attempt_until_the_run_is_final(store):
    # Given run-level concurrency (limit 1) and two runs
    per_run = SlotRequest("run:customer-1", 1, "run")
    m1, m2 = submit_all(store, "r1", "r2")
    first = claim(store, m1, per_run)
    # When r1 moves on to its next step / Then it keeps its slot (same token) and r2 still waits
    done = store.commit(succeed_and_go(first, "b"), T0 + 1)
    (nxt,) = done.messages
    again = claim(store, nxt, per_run, now=T0 + 1)
    assert [g.fence for g in again.grants] == [1]
    with pytest.raises(SlotsBusy):
        claim(store, m2, per_run, now=T0 + 1)
    # When r1 completes / Then the slot goes back and r2 takes it
    store.commit(succeed_and_go(again, None, state="completed"), T0 + 2)
    assert [g.fence for g in claim(store, m2, per_run, now=T0 + 2).grants] == [2]


def test_a_cancelled_waiter_leaves_the_line(store):
    # Given r2 and r3 waiting for a lock r1 holds
    lock = SlotRequest("lock:res")
    m1, m2, m3 = submit_all(store, "r1", "r2", "r3")
    first = claim(store, m1, lock)
    for m in (m2, m3):
        with pytest.raises(SlotsBusy):
            claim(store, m, lock)
    # When r2 is cancelled and r1 finishes / Then r3 is next, not stuck behind a cancelled run
    store.cancel("r2", T0 + 1, actor="user:ana")
    store.commit(Commit(run_id="r1", expected_rev=first.run.rev,
                        step=StepChange("a", 1, first.attempt.token, "failed", error_class="internal",
                                        error_message="boom"),
                        run=RunChange(state="failed")), T0 + 2)
    assert claim(store, m3, lock, now=T0 + 2).grants[0].fence == 2


def test_a_waiter_rechecks_within_the_safety_interval_when_no_lease_bounds_the_wait(store):
    # Given a run-scope holder (no lease of its own) and a waiter
    per_run = SlotRequest("run:k", 1, "run")
    m1, m2 = submit_all(store, "r1", "r2")
    claim(store, m1, per_run)
    with pytest.raises(SlotsBusy) as got:
        claim(store, m2, per_run)
    # Then its row is due again no later than RECHECK_S (r1's running attempt bounds it sooner)
    assert 0 < got.value.retry_in <= RECHECK_S
