"""Several server processes on one store: two app instances, each on its own Runtime and store connection
(as two ``serve --workers`` processes are), on SQLite and on PostgreSQL. Sessions, OIDC logins and rate
limits made on one are known to the other. One fake clock drives both (no timed assertions).

Given / When / Then in each test.
"""

from __future__ import annotations

import html
import random
import urllib.parse

import httpx
import pytest
from fastapi.testclient import TestClient
from interp_helpers import BACKENDS
from oidc_provider import Provider

from sealflow.policy.access import FileAccess
from sealflow.runtime.facade import Runtime
from sealflow.server import tokens
from sealflow.server.app import create_app
from sealflow.server.oidc import OidcSettings
from sealflow.server.oidc_login import STATE_COOKIE, OidcLoginSettings
from sealflow.server.settings import ServerSettings
from sealflow.server.ui.sessions import COOKIE, IDLE, MAX_AGE
from sealflow.store import open_store

CLIENT_ID = "sealflow-ui"
REDIRECT = "http://testserver/ui/oidc/callback"


@pytest.fixture(params=BACKENDS)
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/shared.db"
    return request.getfixturevalue("pg_schema").url(clock="caller", migrate="1", pool_max="4")


@pytest.fixture
def runtimes(store_url, registry, clock, policy):
    """Two runtimes, each with its own store connection, on one store and one fake clock."""
    made = [Runtime(open_store(store_url, clock=clock), registry, {}, rng=random.Random(7), worker_timeout_ms=20,
                    access=FileAccess(policy.path)) for _ in range(2)]
    yield made
    for rt in made:
        rt.close()
        rt.store.close()


def clients(runtimes, settings: ServerSettings) -> tuple[TestClient, TestClient]:
    return tuple(TestClient(create_app(settings, rt), raise_server_exceptions=False) for rt in runtimes)


def signed_in(client: TestClient, rt, principal: str = "user:bob") -> str:
    """Sign ``principal`` in on ``client`` with a new API token; the session id (the cookie's value)."""
    text, _ = tokens.create(rt.store, principal, "acme", rt.clock.now(), actor="user:root")
    page = client.get("/ui/signin").text
    csrf = page.split('name="csrf_token" value="')[1].split('"')[0]
    done = client.post("/ui/signin", data={"csrf_token": csrf, "token": text}, follow_redirects=False)
    assert done.status_code == 303
    return done.cookies[COOKIE]


def page(client: TestClient, session_id: str, path: str = "/ui/approvals"):
    return client.get(path, headers={"cookie": f"{COOKIE}={session_id}"}, follow_redirects=False)


def test_a_session_made_on_one_server_works_on_another_and_signing_out_ends_it_everywhere(runtimes):
    a, b = clients(runtimes, ServerSettings(rate=0))
    # Given bob signed in on server A
    session_id = signed_in(a, runtimes[0])
    # When his browser's next request reaches server B
    on_b = page(b, session_id)
    # Then B knows his session, with the same CSRF secret
    assert on_b.status_code == 200 and "user:bob" in on_b.text
    csrf = on_b.text.split('name="csrf_token" value="')[1].split('"')[0]
    assert csrf in page(a, session_id).text
    # And the store holds only a hash of the session id, never the id
    stored = runtimes[1].store._read("SELECT * FROM ui_sessions")
    assert len(stored) == 1 and session_id not in repr(stored)
    # When he signs out on B
    out = b.post("/ui/signout", data={"csrf_token": csrf}, headers={"cookie": f"{COOKIE}={session_id}"},
                 follow_redirects=False)
    # Then the session is gone on A as well
    assert out.status_code == 303
    assert page(a, session_id).headers["location"] == "/ui/signin"
    assert runtimes[0].store._read("SELECT COUNT(*) FROM ui_sessions")[0][0] == 0


def test_an_idle_or_too_old_session_is_refused_by_every_server(runtimes, clock):
    a, b = clients(runtimes, ServerSettings(rate=0))
    # Given two sessions made on A
    idle, busy = signed_in(a, runtimes[0]), signed_in(a, runtimes[0], "user:cy")
    # When one is not used for longer than the idle limit, while the other is used on B every 25 minutes
    steps = int(MAX_AGE // (25 * 60))
    for _ in range(steps):
        clock.advance(25 * 60)
        assert page(b, busy).status_code == 200
    # Then the idle one is refused on both servers
    assert steps * 25 * 60 > IDLE
    assert page(b, idle).headers["location"] == "/ui/signin" and page(a, idle).status_code == 303
    # And the busy one, once older than the absolute limit (though used minutes ago), is refused too
    clock.advance(MAX_AGE - steps * 25 * 60 + 1)
    assert page(a, busy).headers["location"] == "/ui/signin"
    assert page(b, busy).headers["location"] == "/ui/signin"


def test_an_oidc_login_started_on_one_server_completes_on_another_and_cannot_be_replayed(runtimes, keys, jwks):
    with Provider(keys[0], client_id=CLIENT_ID) as provider:
        settings = ServerSettings(rate=0, oidc=OidcSettings(issuer=provider.url, audience="sealflow-api",
                                                            jwks_path=str(jwks), leeway=5),
                                  oidc_login=OidcLoginSettings(client_id=CLIENT_ID, redirect_uri=REDIRECT))
        a, b = clients(runtimes, settings)
        # Given bob starts the login on server A
        started = a.get("/ui/oidc/login", follow_redirects=False)
        state = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(started.headers["location"]).query))["state"]
        answer = httpx.get(started.headers["location"], follow_redirects=False)
        back = urllib.parse.urlsplit(answer.headers["location"])
        callback = f"{back.path}?{back.query}"
        # When the provider sends his browser back to server B
        done = b.get(callback, headers={"cookie": f"{STATE_COOKIE}={state}"})
        # Then B completes the login (the state, nonce and PKCE verifier came from the store) and opens a session
        assert done.status_code == 200 and "Signed in as user:bob (acme)" in done.text
        assert provider.token_requests[0]["code_verifier"]
        assert page(a, done.cookies[COOKIE]).status_code == 200
        # And the store never held the state itself, and holds nothing of the spent login
        assert runtimes[0].store._read("SELECT COUNT(*) FROM oidc_logins")[0][0] == 0
        # When the same callback is replayed, on A or on B
        for server in (a, b):
            again = server.get(callback, headers={"cookie": f"{STATE_COOKIE}={state}"})
            # Then the state is spent everywhere
            assert again.status_code == 403 and "already used" in html.unescape(again.text)
        assert len(provider.token_requests) == 1


def test_two_servers_share_one_rate_limit_per_principal(runtimes, clock):
    # Given a limit of 1 request a second with bursts of 3, on two servers
    a, b = clients(runtimes, ServerSettings(rate=1, burst=3))
    text, _ = tokens.create(runtimes[0].store, "user:alice", "acme", clock.now(), actor="user:root")
    auth = {"Authorization": f"Bearer {text}"}
    # When alice sends 10 requests, alternating between the servers, at one instant
    codes = [(a, b)[i % 2].get("/v1/runs", headers=auth).status_code for i in range(10)]
    # Then together they grant the burst, no more
    assert codes.count(200) == 3 and codes.count(429) == 7
    # When the window has passed / Then the burst is granted again, and no more
    clock.advance(3.0)
    codes = [(b, a)[i % 2].get("/v1/runs", headers=auth).status_code for i in range(6)]
    assert codes.count(200) == 3 and codes.count(429) == 3
    # And another principal has its own limit
    other, _ = tokens.create(runtimes[0].store, "user:bob", "acme", clock.now(), actor="user:root")
    assert b.get("/v1/runs", headers={"Authorization": f"Bearer {other}"}).status_code == 200


def test_two_servers_share_one_failed_authentication_limit(runtimes):
    a, b = clients(runtimes, ServerSettings(rate=0))
    # When one client sends 14 bad credentials, alternating between the servers
    codes = [(a, b)[i % 2].get("/v1/runs", headers={"Authorization": "Bearer sf_nope"}).status_code
             for i in range(14)]
    # Then 10 are refused and audited, and the rest are rate limited without an audit event
    assert codes.count(401) == 10 and codes.count(429) == 4
    audited = [e for e in runtimes[1].store.audit(None) if e.event == "auth_failed"]
    assert len(audited) == 10
