"""A new run's id (service/submitting.py): time-ordered, unique, unguessable."""

from __future__ import annotations

import re

from interp_helpers import S, make_plan

from sealflow.execution.actions import action
from sealflow.runtime import submitting
from sealflow.runtime.submitting import new_run_id

RUN_ID = re.compile(r"run_[0-9a-f]{28}")


def test_ids_made_later_sort_later_and_carry_their_time(monkeypatch):
    # Given a clock that moves a millisecond at a time, then back
    moments = iter([1_796_000_000.000, 1_796_000_000.001, 1_796_000_000.002, 1_796_000_000.001])
    monkeypatch.setattr(submitting.time, "time", lambda: next(moments))
    # When ids are made at each
    ids = [new_run_id() for _ in range(4)]
    # Then each is run_ and 28 hex digits, the first 12 its time in ms
    assert all(RUN_ID.fullmatch(i) for i in ids), ids
    assert [int(i[4:16], 16) for i in ids] == [1_796_000_000_000, 1_796_000_000_001, 1_796_000_000_002,
                                              1_796_000_000_001]
    # and the ids of a clock that goes forward sort as they were made
    assert ids[:3] == sorted(ids[:3])


def test_ids_of_one_millisecond_differ_in_64_random_bits(monkeypatch):
    # Given a clock stopped at one millisecond
    monkeypatch.setattr(submitting.time, "time", lambda: 1_796_000_000.5)
    # When a thousand ids are made
    ids = [new_run_id() for _ in range(1000)]
    # Then they share the time part and are all different, in a random part that is not a counter
    assert len({i[:16] for i in ids}) == 1
    assert len(set(ids)) == 1000
    tails = sorted(int(i[16:], 16) for i in ids)
    assert tails[-1] - tails[0] > 2**60  # spread over the 64-bit range, not consecutive


def test_runs_submitted_one_after_another_get_ids_in_that_order(runtime, registry):
    # Given a one-step workflow
    @action("ids.noop", registry=registry)
    def noop(ctx):
        return {}

    plan = make_plan(S("a", "action", action="ids.noop"))
    # When runs are submitted one after another, a millisecond apart at least
    ids = []
    for _ in range(5):
        ids.append(runtime.submit(plan, {}, initiator="user:ann"))
        while int(new_run_id()[4:16], 16) == int(ids[-1][4:16], 16):
            pass
    # Then their ids are in the new form and sort in the order they were submitted
    assert all(RUN_ID.fullmatch(i) for i in ids), ids
    assert ids == sorted(ids)
