"""The store contract for per-model rate limits, run against every backend (the ``store`` fixture).

Given / When / Then in each test; the clock is the caller's (``T0`` and offsets from it).
"""

from __future__ import annotations

import threading

import pytest

from sealflow.core.ratelimits import Limit, free_at, never_fits

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


def _totals(store, model: str) -> tuple[int, int]:
    """The model row's running totals, and the count and token sum of its grants (they must agree)."""
    (row,) = store._read("SELECT requests, tokens FROM rate_limits WHERE model = ?", (model,))
    (grants,) = store._read("SELECT COUNT(*), COALESCE(SUM(tokens), 0) FROM rate_grants WHERE model = ?", (model,))
    assert (int(row[0]), int(row[1])) == (int(grants[0]), int(grants[1])), (row, grants)
    return int(row[0]), int(row[1])


def test_the_running_totals_follow_every_take_settle_release_and_expiry(store):
    # Given a model limited by requests and tokens
    limit = Limit(requests=5, tokens=1000)
    # When calls are granted, one taken again under the same key, one settled lower, one released
    assert store.rate_take("m", "a", T0, limit, 300) is None
    assert store.rate_take("m", "b", T0 + 1, limit, 200) is None
    assert store.rate_take("m", "b", T0 + 2, limit, 250) is None  # the same call again: its old grant goes
    assert _totals(store, "m") == (2, 550)
    assert store.rate_settle("b", 50) is True and _totals(store, "m") == (2, 350)
    assert store.rate_settle("b", 400) is True and _totals(store, "m") == (2, 350)  # never raised
    assert store.rate_release("a") is True and _totals(store, "m") == (1, 50)
    assert store.rate_release("a") is False and store.rate_settle("a", 1) is False
    # Then a take after the window drops the old grant from the totals and counts only the new one
    assert store.rate_take("m", "c", T0 + 62, limit, 100) is None
    assert _totals(store, "m") == (1, 100) and store.rate_usage("m", T0 + 62) == (1, 100)
    # And a refused take changes nothing
    assert store.rate_take("m", "d", T0 + 63, limit, 950) == pytest.approx(T0 + 122)
    assert _totals(store, "m") == (1, 100)
    # And a call taken again for another model leaves the first model's totals
    assert store.rate_take("other", "e", T0 + 63, limit, 70) is None and _totals(store, "other") == (1, 70)
    assert store.rate_take("m", "e", T0 + 64, limit, 80) is None
    assert _totals(store, "other") == (0, 0) and _totals(store, "m") == (2, 180)


def test_a_request_limit_over_many_grants_says_when_the_oldest_needed_leaves(store):
    # Given 50 grants of a limit of 50 requests, one a second
    limit = Limit(requests=50)
    for i in range(50):
        assert store.rate_take("busy", f"g{i}", T0 + i, limit, 0) is None
    # When one more asks at T0+55 / Then it waits for the first grant to leave, as the sliding window says
    live = [(T0 + i, 0) for i in range(50)]
    assert store.rate_take("busy", "late", T0 + 55, limit, 0) == pytest.approx(free_at(live, T0 + 55, limit, 0))
    assert store.rate_take("busy", "late", T0 + 55, limit, 0) == pytest.approx(T0 + 60)
    # When six grants have left (T0 to T0+5, at T0+65) / Then six more fit, and the next waits for the T0+6 one
    for i in range(6):
        assert store.rate_take("busy", f"n{i}", T0 + 65, limit, 0) is None
    assert store.rate_take("busy", "n6", T0 + 65, limit, 0) == pytest.approx(T0 + 66)
    assert _totals(store, "busy") == (50, 0)


def test_the_server_sweep_removes_idle_keys_with_their_grants_and_keeps_the_totals_of_live_ones(store):
    # Given two server rate-limit keys: one idle for longer than the window, one used just now
    limit = Limit(requests=10)
    for i in range(3):
        assert store.rate_take("@http:idle", f"i{i}", T0 + i, limit, 0) is None
    assert store.rate_take("@http:live", "l0", T0, limit, 0) is None
    assert store.rate_take("@http:live", "l1", T0 + 100, limit, 0) is None
    # When the server sweeps at T0+100 with a 60 s window
    store.server_sweep(T0 + 100, 60.0)
    # Then the idle key and its grants are gone; the live key keeps its row and totals, which agree with its grants
    assert store._read("SELECT model FROM rate_limits WHERE model = ?", ("@http:idle",)) == []
    assert store._read("SELECT key FROM rate_grants WHERE model = ?", ("@http:idle",)) == []
    assert _totals(store, "@http:live") == (1, 0)  # (its old grant left at its own take)


def test_grants_written_by_an_older_sealflow_that_knows_no_totals_keep_them_right(store):
    # Given a model with a grant taken by this sealflow
    limit = Limit(requests=3)
    assert store.rate_take("m", "new", T0, limit, 10) is None
    # When a worker of an older sealflow (mid-upgrade) writes grants as it did: no totals moved by its statements
    with store._tx() as c:
        c.execute("INSERT INTO rate_grants (key, model, at, tokens) VALUES (?, ?, ?, ?)", ("old1", "m", T0 + 1, 20))
        c.execute("INSERT INTO rate_grants (key, model, at, tokens) VALUES (?, ?, ?, ?)", ("old2", "m", T0 + 2, 30))
        c.execute("UPDATE rate_grants SET tokens = CASE WHEN ? < tokens THEN ? ELSE tokens END WHERE key = ?",
                  (5, 5, "old2"))
    # Then the totals count its grants too, and the limit holds across both versions' grants
    assert _totals(store, "m") == (3, 35)
    assert store.rate_take("m", "over", T0 + 3, limit, 10) == pytest.approx(T0 + 60)
    # When the older worker removes the window's old grants and then the model's row (its sweep did so)
    with store._tx() as c:
        c.execute("DELETE FROM rate_grants WHERE model = ? AND at <= ?", ("m", T0 + 0.5))
    assert _totals(store, "m") == (2, 25)
    with store._tx() as c:
        c.execute("DELETE FROM rate_limits WHERE model = ?", ("m",))
    # Then no grant outlives its row: a new take starts from nothing and its totals agree with its grants
    assert store._read("SELECT key FROM rate_grants WHERE model = ?", ("m",)) == []
    assert store.rate_take("m", "again", T0 + 4, limit, 7) is None and _totals(store, "m") == (1, 7)


def test_a_negative_token_count_frees_no_capacity_that_is_not_there(store):
    # Given a token limit with one call granted its worst case
    limit = Limit(tokens=1000)
    assert store.rate_take("m", "a", T0, limit, 600) is None
    # When a provider of one's own reports a negative use, and a call asks with a negative worst case
    assert store.rate_settle("a", -5000) is True
    assert store.rate_take("m", "b", T0 + 1, limit, -5000) is None
    # Then each counts as nothing used, never as capacity given back: the totals stay at zero
    assert _totals(store, "m") == (2, 0)
    assert store.rate_take("m", "d", T0 + 2, limit, 1000) is None
    assert store.rate_take("m", "e", T0 + 3, limit, 1) == pytest.approx(T0 + 62)
