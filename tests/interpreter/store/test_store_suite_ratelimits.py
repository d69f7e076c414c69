"""The store contract for per-model rate limits, run against every backend (the ``store`` fixture).

Given / When / Then in each test; the clock is the caller's (``T0`` and offsets from it).
"""

from __future__ import annotations

import threading

import pytest

from sealflow.interpreter.core.ratelimits import Limit, free_at, never_fits

T0 = 1_700_000_000.0


def test_a_request_limit_grants_n_calls_per_window_and_says_when_the_next_fits(store):
    # Given a model limited to 3 requests per minute
    limit = Limit(requests=3)
    # When three calls are taken at T0, T0+1, T0+2 / Then each is granted
    for i in range(3):
        assert store.rate_take("fast", f"k{i}", T0 + i, limit, 10) is None
    # When a fourth is asked for at T0+3 / Then it is refused until the first grant leaves the window
    assert store.rate_take("fast", "k3", T0 + 3, limit, 10) == pytest.approx(T0 + 60)
    assert store.rate_usage("fast", T0 + 3) == (3, 30)
    # ... and a refusal wrote nothing: just before T0+60 it is still refused
    assert store.rate_take("fast", "k3", T0 + 59.9, limit, 10) == pytest.approx(T0 + 60)
    # When the window has moved past the first grant / Then the call is granted, and the next waits for the second
    assert store.rate_take("fast", "k3", T0 + 60, limit, 10) is None
    assert store.rate_take("fast", "k4", T0 + 60, limit, 10) == pytest.approx(T0 + 61)


def test_a_token_limit_counts_the_worst_case_and_settling_gives_the_unused_part_back(store):
    # Given a model limited to 1000 tokens per minute, and a call granted with a worst case of 700
    limit = Limit(tokens=1000)
    assert store.rate_take("fast", "a", T0, limit, 700) is None
    # When a second call with a worst case of 400 asks / Then it must wait for the first to leave the window
    assert store.rate_take("fast", "b", T0 + 1, limit, 400) == pytest.approx(T0 + 60)
    # When the first call is settled with what it really used (250)
    assert store.rate_settle("a", 250) is True
    # Then the second fits at once
    assert store.rate_take("fast", "b", T0 + 2, limit, 400) is None
    assert store.rate_usage("fast", T0 + 2) == (2, 650)
    # ... and settling never raises a grant above its worst case
    store.rate_settle("b", 5000)
    assert store.rate_usage("fast", T0 + 2) == (2, 650)


def test_a_released_grant_counts_as_no_request_and_frees_its_place_at_once(store):
    # Given a model limited to 1 request per minute, its one request granted
    limit = Limit(requests=1)
    assert store.rate_take("fast", "a", T0, limit, 10) is None
    assert store.rate_take("fast", "b", T0 + 1, limit, 10) == pytest.approx(T0 + 60)
    # When the granted call is given back whole (it was never made)
    assert store.rate_release("a") is True
    # Then nothing is counted, the next call is granted at once, and releasing again finds nothing
    assert store.rate_usage("fast", T0 + 1) == (0, 0)
    assert store.rate_take("fast", "b", T0 + 1, limit, 10) is None
    assert store.rate_release("a") is False


def test_both_limits_apply_and_models_are_limited_separately(store):
    # Given a model limited to 2 requests and 100 tokens per minute
    limit = Limit(requests=2, tokens=100)
    assert store.rate_take("fast", "a", T0, limit, 60) is None
    # When a second call would pass the tokens (not the requests) / Then it waits
    assert store.rate_take("fast", "b", T0 + 1, limit, 60) == pytest.approx(T0 + 60)
    # When another model is asked / Then its own limit applies, untouched by the first model's grants
    assert store.rate_take("slow", "c", T0 + 1, limit, 60) is None
    assert store.rate_usage("slow", T0 + 1) == (1, 60)


def test_concurrent_takers_never_pass_the_limit_together(store):
    # Given 8 threads asking at the same moment for a model limited to 3 requests per minute
    limit = Limit(requests=3)
    results: list = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def take(i: int) -> None:
        barrier.wait()
        got = store.rate_take("fast", f"t{i}", T0, limit, 1)
        with lock:
            results.append(got)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(8)]
    # When they all take
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Then exactly 3 were granted and the 5 others were told when the window frees
    assert sorted(r is None for r in results) == [False] * 5 + [True] * 3
    assert all(r == pytest.approx(T0 + 60) for r in results if r is not None)
    assert store.rate_usage("fast", T0) == (3, 3)


def test_the_rule_says_when_enough_old_grants_leave():
    # Given grants of 400, 300, 200 tokens at T0, T0+10, T0+20 under 1000 tokens per minute
    grants = [(T0, 400), (T0 + 10, 300), (T0 + 20, 200)]
    limit = Limit(tokens=1000)
    # When a call of 100 asks / Then it fits; one of 500 waits for the first grant to leave (T0+60), one of
    # 800 for the first two (T0+70)
    assert free_at(grants, T0 + 30, limit, 100) is None
    assert free_at(grants, T0 + 30, limit, 500) == T0 + 60
    assert free_at(grants, T0 + 30, limit, 800) == T0 + 70
    # ... and a call over the whole limit can never fit
    assert never_fits(limit, 1001) and not never_fits(limit, 1000)
