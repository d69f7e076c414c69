"""The one commit-retry loop: rebuild after a revision conflict, hand fencing to the caller, give up loudly."""

from __future__ import annotations

import pytest

from sealflow.interpreter.core.clock import FakeClock
from sealflow.interpreter.engine.committing import AGAIN, TRIES, commit_retrying
from sealflow.interpreter.store.errors import ConcurrencyError, FencingError
from sealflow.interpreter.store.records import Committed


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
