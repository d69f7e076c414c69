"""A commit written on the engine's view of the run (``Commit.seen``), checked by the store before it returns:
on every backend, a view that is not the store's is refused exactly as a stale commit read first would be,
and nothing of it is kept (Given / When / Then)."""

from __future__ import annotations

import dataclasses

import pytest
from test_store_suite import T0, snapshot, submit_and_claim, succeed_and_go

from sealflow.store import ConcurrencyError, FencingError, StepChange


def seen_of(claimed):
    run, att = claimed.run, claimed.attempt
    return (run.state, run.tenant, run.parent_run_id, att.state)


def test_a_commit_on_a_view_the_store_holds_is_written(store):
    # Given a claimed attempt and the view the claim returned
    claimed, _ = submit_and_claim(store)
    # When its result is committed on that view, the next step claimed by the same worker
    done = store.commit(dataclasses.replace(succeed_and_go(claimed), seen=seen_of(claimed), claim_as="w1"), T0 + 1)
    # Then it is written as a commit read first would be
    assert done.claimed is not None and done.claimed.attempt.step_id == "b"
    assert [a.state for a in store.attempts("r1")] == ["succeeded", "running"]
    assert store.get_run("r1").rev == claimed.run.rev + 1


def test_a_zombie_commit_on_its_old_view_is_fenced_and_leaves_nothing(store):
    # Given an attempt whose lease was lost: the sweep gave it to another worker (a new token)
    claimed, _ = submit_and_claim(store)
    store.sweep(T0 + 31)  # the 30 s lease expired
    (msg,) = store.take_outbox(T0 + 31)
    store.claim(*msg, owner="w2", now=T0 + 31)
    before = snapshot(store, "r1")
    # When the first worker commits on the view it had
    commit = dataclasses.replace(succeed_and_go(claimed, rev=store.get_run("r1").rev), seen=seen_of(claimed))
    # Then it is fenced like any stale commit, and nothing of it is kept (no attempt, no audit row)
    with pytest.raises(FencingError, match="no longer current"):
        store.commit(commit, T0 + 32)
    assert snapshot(store, "r1") == before


def test_a_view_of_another_revision_is_a_conflict_and_leaves_nothing(store):
    # Given a claimed attempt, and the run moved on since the view was taken (a new revision)
    claimed, _ = submit_and_claim(store)
    store.cancel("r1", T0 + 1, actor="user:ana")
    before = snapshot(store, "r1")
    # When the worker commits on its view at the old revision
    # Then it is refused as a conflict: decide again on a fresh read; nothing is kept
    with pytest.raises(ConcurrencyError):
        store.commit(dataclasses.replace(succeed_and_go(claimed), seen=seen_of(claimed)), T0 + 2)
    assert snapshot(store, "r1") == before


@pytest.mark.parametrize("wrong", ["state", "tenant", "attempt"])
def test_a_view_that_differs_from_the_store_at_the_same_revision_is_refused(store, wrong):
    # Given a claimed attempt and a view of it that is wrong in one part, at the right revision and token
    claimed, _ = submit_and_claim(store)
    run_state, tenant, parent, att_state = seen_of(claimed)
    seen = {"state": ("waiting", tenant, parent, att_state), "tenant": (run_state, "other", parent, att_state),
            "attempt": (run_state, tenant, parent, "waiting")}[wrong]
    before = snapshot(store, "r1")
    # When the commit is written on that view
    # Then the store refuses it before it returns, and nothing of it is kept
    with pytest.raises(ConcurrencyError, match="not as it was read"):
        store.commit(dataclasses.replace(succeed_and_go(claimed), seen=seen), T0 + 1)
    assert snapshot(store, "r1") == before


def test_a_wrong_view_that_makes_an_illegal_move_is_refused_as_stale_not_audited_as_illegal(store):
    # Given a claimed attempt, and a view that says it is waiting (from waiting, "retry_wait" is not a move)
    claimed, _ = submit_and_claim(store)
    run_state, tenant, parent, _ = seen_of(claimed)
    att = claimed.attempt
    commit = dataclasses.replace(
        succeed_and_go(claimed, next_step=None),
        step=StepChange(att.step_id, att.attempt, att.token, "retry_wait", due_at=T0 + 5), next=None,
        seen=(run_state, tenant, parent, "cancelled"))
    before = snapshot(store, "r1")
    # When it is committed
    # Then it fails as a stale view would (a conflict), and no illegal_transition is written
    with pytest.raises(ConcurrencyError, match="not as it was read"):
        store.commit(commit, T0 + 1)
    assert snapshot(store, "r1") == before
