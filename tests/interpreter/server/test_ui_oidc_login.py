"""The /ui OIDC login flow (authorization code + PKCE, state, nonce) against a small real OIDC provider on
loopback (tests/oidc_provider.py), through FastAPI's test client with its cookie jar.

Given / When / Then in each test.
"""

from __future__ import annotations

import html
import time
import urllib.parse

import httpx
import pytest
from fastapi.testclient import TestClient
from oidc_provider import Provider

from sealflow.cli import main
from sealflow.server.app import StartupError, create_app
from sealflow.server.oidc import OidcConfigError, OidcSettings
from sealflow.server.oidc_login import STATE_COOKIE, LoginFlow, OidcLoginSettings
from sealflow.server.settings import ServerSettings
from sealflow.server.ui.sessions import COOKIE

CLIENT_ID = "sealflow-ui"
REDIRECT = "http://testserver/ui/oidc/callback"


@pytest.fixture
def provider(keys):
    with Provider(keys[0], client_id=CLIENT_ID) as p:
        yield p


def settings_for(provider, jwks, **login) -> ServerSettings:
    return ServerSettings(rate=0, oidc=OidcSettings(issuer=provider.url, audience="sealflow-api", jwks_path=str(jwks),
                                                    leeway=5),
                          oidc_login=OidcLoginSettings(client_id=CLIENT_ID, redirect_uri=REDIRECT, **login))


@pytest.fixture
def client(rt, known, provider, jwks):
    with TestClient(create_app(settings_for(provider, jwks), rt), raise_server_exceptions=False) as c:
        yield c


def failures(rt) -> list[dict]:
    return [e.detail for e in rt.store.audit(None) if e.event == "auth_failed"]


def to_provider(client) -> tuple[str, dict]:
    """Start a login: the authorization URL the browser is sent to, and its query."""
    started = client.get("/ui/oidc/login", follow_redirects=False)
    assert started.status_code == 303
    url = started.headers["location"]
    return url, dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))


def back_from_provider(url: str) -> str:
    """What the provider redirects the browser back to (path and query of the callback)."""
    answer = httpx.get(url, follow_redirects=False)
    assert answer.status_code == 302, answer.text
    back = urllib.parse.urlsplit(answer.headers["location"])
    assert f"{back.scheme}://{back.netloc}{back.path}" == REDIRECT
    return f"{back.path}?{back.query}"


def test_a_person_signs_in_with_the_code_flow_and_gets_a_ui_session(client, provider, rt):
    # Given the sign-in page offers the identity provider
    assert 'href="/ui/oidc/login"' in client.get("/ui/signin").text
    # When bob starts the login
    url, query = to_provider(client)
    # Then he goes to the discovered authorization endpoint with a code request, state, nonce and a PKCE challenge
    assert url.startswith(provider.url + "/authorize?")
    assert query["response_type"] == "code" and query["client_id"] == CLIENT_ID and query["scope"] == "openid"
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
    assert query["redirect_uri"] == REDIRECT and query["state"] and query["nonce"]
    assert client.cookies.get(STATE_COOKIE) == query["state"]
    # When the provider sends him back with a code
    done = client.get(back_from_provider(url))
    # Then the code was exchanged with the PKCE verifier and he has a session (the cookie, never the token)
    assert done.status_code == 200 and "Signed in as user:bob (acme)" in done.text
    (exchange,) = provider.token_requests
    assert exchange["code_verifier"] and exchange["redirect_uri"] == REDIRECT
    assert "samesite=strict" in done.headers["set-cookie"].lower() and client.cookies.get(COOKIE)
    page = client.get("/ui/approvals")
    assert page.status_code == 200 and "user:bob" in page.text


def test_a_callback_with_another_state_or_from_another_browser_is_refused(client, provider, rt, known, jwks):
    # Given a login in progress
    url, _ = to_provider(client)
    callback = back_from_provider(url)
    # When the callback arrives with a state that is not this browser's
    path, query = callback.split("?")
    params = dict(urllib.parse.parse_qsl(query))
    forged = client.get(f"{path}?{urllib.parse.urlencode({**params, 'state': 'attacker-state'})}")
    # Then it is refused and audited, and no session starts
    assert forged.status_code == 403 and "state does not match" in html.unescape(forged.text)
    assert client.cookies.get(COOKIE) is None and provider.token_requests == []
    assert failures(rt)[-1]["reason"] == "wrong-state" and failures(rt)[-1]["method"] == "oidc"
    # And the genuine callback delivered to another browser (login CSRF) is refused too
    with TestClient(client.app, raise_server_exceptions=False) as other:
        assert other.get(callback).status_code == 403 and other.cookies.get(COOKIE) is None


def test_a_replayed_callback_is_refused(client, provider):
    # Given a login completed
    url, query = to_provider(client)
    callback = back_from_provider(url)
    assert client.get(callback).status_code == 200
    # When the same callback comes again, with its state cookie put back
    client.cookies.set(STATE_COOKIE, query["state"], path="/ui/oidc")
    again = client.get(callback)
    # Then the state is spent: refused
    assert again.status_code == 403 and "already used" in html.unescape(again.text)


@pytest.mark.parametrize("override, message", [
    ({"nonce": "another-login-s-nonce"}, "nonce is not this login's"),
    ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}, "has expired"),
    ({"aud": "another-client"}, "is not for audience 'sealflow-ui'"),
    ({"aud": [CLIENT_ID, "another-client"], "azp": "another-client"}, "not issued to this client"),
    ({"iss": "https://evil.example"}, "was not issued by"),
])
def test_an_id_token_that_does_not_hold_is_refused(client, provider, rt, override, message):
    # Given a provider answering an ID token with a wrong claim
    provider.overrides = override
    # When the login completes
    url, _ = to_provider(client)
    refused = client.get(back_from_provider(url))
    # Then no session starts, the page says why, and the failure is audited
    assert refused.status_code == 401 and message in html.unescape(refused.text), refused.text
    assert client.cookies.get(COOKIE) is None
    assert failures(rt)[-1]["method"] == "oidc"


def test_an_id_token_signed_by_a_key_not_pinned_is_refused(client, provider, keys):
    # Given a provider signing with a key that the pinned JWKS does not hold (same kid)
    provider.key_for_tokens = keys[1]
    url, _ = to_provider(client)
    # When the login completes / Then it is refused
    refused = client.get(back_from_provider(url))
    assert refused.status_code == 401 and "signature does not verify" in html.unescape(refused.text)


def test_the_provider_s_refusal_is_shown_and_audited(client, rt):
    # Given a login started
    _, query = to_provider(client)
    # When the provider sends the browser back with an error instead of a code
    refused = client.get(f"/ui/oidc/callback?error=access_denied&state={query['state']}")
    # Then the page says so and nothing starts
    assert refused.status_code == 401 and "refused the sign-in (access_denied)" in html.unescape(refused.text)
    assert failures(rt)[-1]["reason"] == "issuer-error"


def test_a_confidential_client_sends_its_secret_from_the_secret_providers(rt, known, keys, jwks, monkeypatch):
    # Given a provider whose client has a secret, and the secret under its name in the environment
    monkeypatch.setenv("SEALFLOW_SECRET_OIDC_CLIENT", "s3cret")
    with Provider(keys[0], client_id=CLIENT_ID, client_secret="s3cret") as provider:
        app = create_app(settings_for(provider, jwks, client_secret="OIDC_CLIENT"), rt)
        with TestClient(app, raise_server_exceptions=False) as client:
            # When a person signs in / Then the code exchange authenticates the client and the login completes
            url, _ = to_provider(client)
            assert client.get(back_from_provider(url)).status_code == 200
            monkeypatch.delenv("SEALFLOW_SECRET_OIDC_CLIENT")
            url, _ = to_provider(client)
            missing = client.get(back_from_provider(url))
            assert missing.status_code == 401
            assert "client secret OIDC_CLIENT is not available" in html.unescape(missing.text)


def test_the_flow_is_checked_at_start(provider, jwks, tmp_path, capsys):
    oidc = OidcSettings(issuer=provider.url, audience="api", jwks_path=jwks)
    # Given explicit endpoints, nothing is fetched; a wrong one or a discovery document of another issuer refuses
    flow = LoginFlow(oidc, OidcLoginSettings(CLIENT_ID, REDIRECT, authorization_endpoint="https://id/a",
                                             token_endpoint="https://id/t"))
    assert flow.authorization_endpoint == "https://id/a"
    with pytest.raises(OidcConfigError, match="token endpoint: must be an absolute http"):
        LoginFlow(oidc, OidcLoginSettings(CLIENT_ID, REDIRECT, authorization_endpoint="https://id/a",
                                          token_endpoint="javascript:x"))
    for garbage in ("https://[::1/cb", "https://sealflow.example.com:99999/cb"):  # a parser's ValueError, said so
        with pytest.raises(OidcConfigError, match="redirect URI: must be an absolute http"):
            LoginFlow(oidc, OidcLoginSettings(CLIENT_ID, garbage, authorization_endpoint="https://id/a",
                                              token_endpoint="https://id/t"))
    with pytest.raises(OidcConfigError, match="names issuer"):
        LoginFlow(OidcSettings(issuer=provider.url + "/other", audience="api", jwks_path=jwks),
                  OidcLoginSettings(CLIENT_ID, REDIRECT, authorization_endpoint="https://id/a"))
    # And the settings reach uvicorn's worker processes whole; the flow needs the OIDC settings
    settings = settings_for(provider, jwks, scopes=("openid", "email"))
    assert ServerSettings.from_json(settings.to_json()) == settings
    with pytest.raises(StartupError, match="needs the OIDC issuer"):
        create_app(ServerSettings(oidc_login=OidcLoginSettings(CLIENT_ID, REDIRECT)))
    # And `sealflow serve` refuses the flow's options without a client id, or without a redirect URI
    for argv, said in ((["--oidc-redirect-uri", REDIRECT], "need --oidc-client-id"),
                       (["--oidc-client-id", CLIENT_ID, "--oidc-issuer", provider.url, "--oidc-audience", "api",
                         "--oidc-jwks", str(jwks)], "needs --oidc-issuer, --oidc-audience, --oidc-jwks and "
                                               "--oidc-redirect-uri")):
        code = main(["serve", "--allow-open", "--store", f"sqlite:///{tmp_path}/s.db", *argv])
        assert code == 2 and said in capsys.readouterr().err


def test_an_oidc_session_ends_no_later_than_its_id_token(client, provider, rt, clock):
    # Given an ID token that expires in 60 s (the configured session limit is 8 hours)
    provider.overrides = {"exp": int(time.time()) + 60}
    # When bob signs in with it
    url, _ = to_provider(client)
    assert client.get(back_from_provider(url)).status_code == 200
    assert client.get("/ui/approvals").status_code == 200
    # Then the session is still there just before the token's exp, and ends at it (no leeway added)
    clock.advance(50)
    assert client.get("/ui/approvals").status_code == 200
    clock.advance(11)
    gone = client.get("/ui/approvals", follow_redirects=False)
    assert gone.status_code == 303 and gone.headers["location"] == "/ui/signin"
    # And the sign-in was audited with its method
    (signed_in,) = [e for e in rt.store.audit(None) if e.event == "ui_signed_in"]
    assert signed_in.actor == "user:bob" and signed_in.detail["method"] == "oidc"


def test_an_id_token_past_its_exp_but_within_the_leeway_opens_no_session(client, provider, rt):
    # Given an ID token that expired 2 s ago (within the 5 s clock-skew leeway of its verification)
    provider.overrides = {"exp": int(time.time()) - 2}
    # When the login completes
    url, _ = to_provider(client)
    refused = client.get(back_from_provider(url))
    # Then no session starts (it would end before it began), the page says why, and it is audited
    assert refused.status_code == 401 and "expired before a session could start" in html.unescape(refused.text)
    assert client.cookies.get(COOKIE) is None
    assert failures(rt)[-1] == {**failures(rt)[-1], "reason": "expired", "method": "oidc"}
