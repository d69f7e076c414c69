"""Notification delivery rows in the store, on every backend (the ``store`` fixture): written with the commit
that opens a gate or not at all, taken under a lease, settled once, dead-lettered with an audit event.

Given / When / Then in each test.
"""

from __future__ import annotations

import dataclasses

import pytest
from test_store_suite import T0, submit_and_claim

from sealflow.store import Commit, FencingError, StepChange
from sealflow.store.deliveries import NewDelivery
from sealflow.testing.conformance.helpers import at


def gate_commit(claimed, *ids: str, token=None) -> Commit:
    att = claimed.attempt
    payload = {"type": "approval.requested", "data": {"run_id": att.run_id, "summary": "Approval needed"}}
    return Commit(run_id=att.run_id, expected_rev=claimed.run.rev,
                  step=StepChange(att.step_id, att.attempt, att.token if token is None else token, "waiting",
                                  due_at=T0 + 3600, data={"opened_at": T0}, timer_kind="approval_timeout"),
                  notifications=tuple(NewDelivery(i, "ops", "webhook", att.step_id, "default", payload) for i in ids))


def test_deliveries_are_written_with_the_commit_that_opens_the_gate(store, clock):
    # Given a claimed attempt
    claimed, _ = submit_and_claim(store)
    # When its commit opens a gate with two deliveries
    store.commit(gate_commit(claimed, "ntf_a", "ntf_b"), T0)
    # Then both are pending and due now, with their payload as written
    rows = store.deliveries(run_id="r1")
    assert sorted(r.id for r in rows) == ["ntf_a", "ntf_b"]
    assert {(r.state, r.attempts, r.next_at, r.tenant) for r in rows} == {("pending", 0, T0, "default")}
    assert rows[0].payload["data"]["summary"] == "Approval needed"


def test_a_fenced_commit_writes_no_delivery(store, clock):
    # Given a claimed attempt
    claimed, _ = submit_and_claim(store)
    # When a commit with a stale token (the attempt moved on) carries deliveries
    with pytest.raises(FencingError):
        store.commit(gate_commit(claimed, "ntf_a", token=claimed.attempt.token + 99), T0)
    # Then none was written: no notification of a gate that never opened
    assert store.deliveries() == []


def test_a_taken_delivery_is_leased_and_settled_once(store, clock):
    # Given a pending delivery
    claimed, _ = submit_and_claim(store)
    store.commit(gate_commit(claimed, "ntf_a"), T0)
    # When a deliverer takes it
    at(clock, T0 + 1)
    (taken,) = store.take_deliveries(lease=30)
    # Then it counts one attempt and nobody else takes it during its lease
    assert taken.attempts == 1 and taken.next_at == T0 + 31
    at(clock, T0 + 2)
    assert store.take_deliveries(lease=30) == []
    # When the lease runs out, another deliverer takes it again (attempt 2)
    at(clock, T0 + 40)
    (again,) = store.take_deliveries(lease=30)
    assert again.attempts == 2
    # Then the first deliverer's late settlement changes nothing; the current one's counts
    at(clock, T0 + 41)
    assert store.settle_delivery(taken, state="delivered") is False
    assert store.settle_delivery(again, state="pending", next_at=T0 + 50, error="HTTP 500") is True
    (row,) = store.deliveries()
    assert (row.state, row.attempts, row.next_at, row.last_error) == ("pending", 2, T0 + 50, "HTTP 500")
    at(clock, T0 + 49)
    assert store.take_deliveries() == []
    at(clock, T0 + 50)
    (third,) = store.take_deliveries()
    at(clock, T0 + 51)
    assert store.settle_delivery(third, state="delivered")
    assert store.deliveries(state="delivered")[0].id == "ntf_a"
    at(clock, T0 + 10_000)
    assert store.take_deliveries() == []


def test_a_failed_delivery_is_dead_lettered_and_audited(store, clock):
    # Given a delivery taken for its last attempt
    claimed, _ = submit_and_claim(store)
    store.commit(gate_commit(claimed, "ntf_a"), T0)
    (taken,) = store.take_deliveries()
    # When it is settled as failed
    at(clock, T0 + 1)
    assert store.settle_delivery(taken, state="failed", error="HTTP 500")
    # Then it is listed as failed, never taken again, and the run's audit trail says so
    assert [r.id for r in store.deliveries(state="failed")] == ["ntf_a"]
    at(clock, T0 + 10_000)
    assert store.take_deliveries() == []
    (event,) = [a for a in store.audit("r1") if a.event == "notification_failed"]
    assert event.detail == {"notification": "ntf_a", "channel": "ops", "kind": "webhook", "attempts": 1,
                            "error": "HTTP 500"}
    # And a settlement state outside the three is refused
    with pytest.raises(ValueError, match="pending"):
        store.settle_delivery(dataclasses.replace(taken, attempts=2), state="sent")


def test_a_failed_delivery_is_retried_once_and_audited(store, clock):
    # Given a delivery that failed for good after its attempt
    claimed, _ = submit_and_claim(store)
    store.commit(gate_commit(claimed, "ntf_a"), T0)
    (taken,) = store.take_deliveries()
    at(clock, T0 + 1)
    store.settle_delivery(taken, state="failed", error="HTTP 500")
    # When an operator retries it
    at(clock, T0 + 100)
    before = store.retry_delivery("ntf_a", actor="user:ops")
    # Then it was failed, and is now pending, due at once, with its attempts counted afresh
    assert before is not None and before.state == "failed" and before.attempts == 1
    (row,) = store.deliveries()
    assert (row.state, row.attempts, row.next_at) == ("pending", 0, T0 + 100)
    at(clock, T0 + 100)
    (again,) = store.take_deliveries()
    assert again.attempts == 1
    # And the run's audit trail names who retried it
    (event,) = [a for a in store.audit("r1") if a.event == "notification_retried"]
    assert event.actor == "user:ops"
    assert event.detail == {"notification": "ntf_a", "channel": "ops", "kind": "webhook", "attempts": 1}


def test_retrying_a_delivery_that_is_not_failed_changes_nothing(store, clock):
    # Given a pending delivery
    claimed, _ = submit_and_claim(store)
    store.commit(gate_commit(claimed, "ntf_a"), T0)
    # When it is retried, and an unknown id too
    at(clock, T0 + 5)
    got = store.retry_delivery("ntf_a", actor="user:ops")
    # Then the pending row is returned as it is, unchanged and unaudited; the unknown id is None
    assert got is not None and got.state == "pending"
    (row,) = store.deliveries()
    assert (row.state, row.next_at, row.updated_at) == ("pending", T0, T0)
    assert not [a for a in store.audit("r1") if a.event == "notification_retried"]
    assert store.retry_delivery("ntf_nope", actor="user:ops") is None
