"""The store contract for the server's sign-in state (``/ui`` sessions, started OIDC logins, the server's rate
limit keys), run against every backend (the ``store`` fixture). The clock is the caller's (``T0`` + offsets).

Given / When / Then in each test.
"""

from __future__ import annotations

import threading

from sealflow.core.ratelimits import Limit
from sealflow.store.sql.sessions import RATE_PREFIX, SessionRow

T0 = 1_700_000_000.0


def row(id_hash: str = "sha256:aa", *, at: float = T0, idle: float = 30.0, max_age: float = 100.0) -> SessionRow:
    return SessionRow(id_hash, "user:bob", "acme", "token", "tok1", "csrf-secret", at, at, idle, at + max_age)


def test_a_session_lives_while_used_within_its_idle_limit_and_its_absolute_age(store):
    # Given a session with 30 s idle and 100 s absolute limits
    store.session_put(row())
    # When it is used every 20 s / Then it stays (its last use recorded once older than touch_after)
    for t in (20, 40, 60, 80):
        got = store.session_get("sha256:aa", T0 + t, touch_after=10)
        assert got is not None and got.used_at == T0 + t and got.csrf == "csrf-secret" and got.token_id == "tok1"
    # When it is older than 100 s / Then it is refused though recently used
    assert store.session_get("sha256:aa", T0 + 100, touch_after=10) is None
    # When another is left idle past 30 s / Then it is refused; an unknown hash is refused
    store.session_put(row("sha256:bb", at=T0 + 100))
    assert store.session_get("sha256:bb", T0 + 129) is not None and store.session_get("sha256:bb", T0 + 130) is None
    assert store.session_get("sha256:nope", T0) is None


def test_ending_a_session_removes_it_once(store):
    # Given a live session
    store.session_put(row())
    # When it ends / Then it is gone, and ending it again says so
    assert store.session_end("sha256:aa") is True
    assert store.session_get("sha256:aa", T0 + 1) is None
    assert store.session_end("sha256:aa") is False


def test_a_started_login_is_spent_once_even_by_concurrent_callbacks(store):
    # Given a started login, valid for 600 s
    store.oidc_login_put("sha256:st", "nonce-1", "verifier-1", T0, T0 + 600)
    # When eight callbacks spend it at once
    got, gate = [], threading.Barrier(8)

    def spend():
        gate.wait()
        got.append(store.oidc_login_spend("sha256:st", T0 + 5))

    threads = [threading.Thread(target=spend) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then exactly one gets its nonce and verifier
    assert sorted(got, key=repr) == [("nonce-1", "verifier-1")] + [None] * 7
    # And an expired login is refused (and removed)
    store.oidc_login_put("sha256:old", "n", "v", T0, T0 + 600)
    assert store.oidc_login_spend("sha256:old", T0 + 600) is None
    assert store.oidc_login_spend("sha256:old", T0) is None


def test_sweeps_are_bounded_and_remove_only_what_ended(store):
    # Given five ended sessions, a live one, and two expired logins
    for i in range(5):
        store.session_put(row(f"sha256:old{i}", idle=10), sweep=0)
    store.session_put(row("sha256:live", at=T0 + 50, idle=1000), sweep=0)
    for i in range(2):
        store.oidc_login_put(f"sha256:login{i}", "n", "v", T0, T0 + 10, sweep=0)
    # When the sweep may remove two rows of each kind
    removed = store.server_sweep(T0 + 60, 10.0, limit=2)
    # Then it removes that many, and a second sweep the rest; the live session stays
    assert removed == 4
    assert store.server_sweep(T0 + 60, 10.0, limit=100) == 3
    assert store.session_get("sha256:live", T0 + 60) is not None


def test_the_rate_limit_sweep_removes_only_old_server_grants(store):
    # Given a server key and a model, each with a grant at T0 and one at T0 + 50
    limit = Limit(requests=10, window=10.0)
    key = RATE_PREFIX + "principal:user:bob"
    for at in (T0, T0 + 50):
        assert store.rate_take(key, f"{RATE_PREFIX}g{at}", at, limit, 0) is None
        assert store.rate_take("gpt", f"m{at}", at, Limit(requests=10), 0) is None
    # When the server sweeps its grants older than 10 s at T0 + 55
    store.server_sweep(T0 + 55, 10.0, rate_prefix=RATE_PREFIX + "principal:")
    # Then only the server key's old grant is gone; the model's grants are untouched
    assert store.rate_usage(key, T0 + 55, window=100.0) == (1, 0)
    assert store.rate_usage("gpt", T0 + 55, window=100.0) == (2, 0)


def test_a_session_given_an_earlier_end_stops_then_and_a_later_one_keeps_the_configured_limit(store):
    from sealflow.core.clock import FakeClock
    from sealflow.server.ui.sessions import Sessions

    # Given sessions with a 100 s absolute limit (idle 1000 s)
    clock = FakeClock(T0)
    sessions = Sessions(store, clock, idle=1000, max_age=100)
    # When one is started to end at T0 + 40 (an ID token's exp) and one to end at T0 + 500
    early = sessions.start("user:bob", "acme", "oidc", expires_at=T0 + 40)
    late = sessions.start("user:bob", "acme", "oidc", expires_at=T0 + 500)
    # Then the first ends at T0 + 40, the second at the configured T0 + 100, never later
    clock.advance(39)
    assert sessions.get(early.id) is not None and sessions.get(late.id) is not None
    clock.advance(1)
    assert sessions.get(early.id) is None and sessions.get(late.id) is not None
    clock.advance(60)
    assert sessions.get(late.id) is None
