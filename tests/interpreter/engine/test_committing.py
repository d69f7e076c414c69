"""The one commit-retry loop: rebuild after a revision conflict, hand fencing to the caller, give up loudly."""

from __future__ import annotations

import pytest

from sealflow.core.clock import FakeClock
from sealflow.engine.committing import AGAIN, TRIES, commit_retrying
from sealflow.store.errors import ConcurrencyError, FencingError
from sealflow.store.records import Committed


class ScriptedStore:
    """A store whose commit raises the scripted errors, then succeeds."""

    def __init__(self, *errors: Exception):
        self.errors = list(errors)
        self.commits: list = []

    def commit(self, commit, now):
        self.commits.append(commit)
        if self.errors:
            raise self.errors.pop(0)
        return Committed(rev=1, run_state="running")


def test_given_conflicts_when_committing_then_the_commit_is_rebuilt_after_each_and_applied():
    store, built, conflicts = ScriptedStore(ConcurrencyError("moved"), ConcurrencyError("moved")), [], []
    done = commit_retrying(store, FakeClock(), lambda: built.append(1) or f"commit{len(built)}",
                           conflict=lambda: conflicts.append(1))
    assert done.run_state == "running" and store.commits == ["commit1", "commit2", "commit3"] and len(conflicts) == 2


def test_given_a_fenced_commit_when_the_handler_returns_then_nothing_more_is_tried():
    store, seen = ScriptedStore(FencingError("late")), []
    assert commit_retrying(store, FakeClock(), lambda: "c", fenced=seen.append) is None
    assert len(store.commits) == 1 and str(seen[0]) == "late"


def test_given_a_fenced_commit_when_the_handler_says_again_then_it_is_rebuilt():
    store = ScriptedStore(FencingError("claimed meanwhile"))
    assert commit_retrying(store, FakeClock(), lambda: "c", fenced=lambda exc: AGAIN) is not None
    assert len(store.commits) == 2


def test_given_nothing_to_commit_when_building_then_the_loop_stops_without_writing():
    store = ScriptedStore()
    assert commit_retrying(store, FakeClock(), lambda: None) is None and store.commits == []


def test_given_endless_conflicts_when_committing_then_it_gives_up_with_the_callers_message():
    store = ScriptedStore(*[ConcurrencyError("moved")] * TRIES)
    with pytest.raises(ConcurrencyError, match="run r1 kept changing"):
        commit_retrying(store, FakeClock(), lambda: "c", gave_up="run r1 kept changing; try again")
    assert commit_retrying(ScriptedStore(*[ConcurrencyError("m")] * TRIES), FakeClock(), lambda: "c") is None


def test_given_a_store_that_cannot_take_a_commit_for_a_while_when_the_lease_lasts_then_the_same_commit_goes_in():
    # Given a store away for three tries (disk full, read-only, the database restarting) and a lease of 30 s
    from sealflow.engine.committing import outlast
    from sealflow.store.errors import StoreUnavailable

    clock = FakeClock()
    store = ScriptedStore(*(StoreUnavailable("disk full") for _ in range(3)))
    # When the step commits
    done = commit_retrying(store, clock, lambda: "c", unavailable=outlast(clock, clock.now() + 30, "step"))
    # Then the same commit was tried again after waiting on the clock (0.1 + 0.2 + 0.4 s), and went in
    assert done is not None and store.commits == ["c"] * 4
    assert clock.now() == pytest.approx(1_700_000_000.7)


def test_given_a_store_away_past_the_lease_when_committing_then_it_gives_up_before_the_lease_ends():
    # Given a store away for good and a lease of 5 s
    from sealflow.engine.committing import MARGIN_S, outlast
    from sealflow.store.errors import StoreUnavailable

    clock = FakeClock()
    start = clock.now()
    store = ScriptedStore(*(StoreUnavailable("read-only") for _ in range(100)))
    # When the step commits, Then it gives up with the store's error, within the lease less its margin
    with pytest.raises(StoreUnavailable, match="read-only"):
        commit_retrying(store, clock, lambda: "c", unavailable=outlast(clock, start + 5, "step"))
    assert clock.now() - start <= 5 - MARGIN_S and len(store.commits) > 2
