"""Hostile credentials (issue 31, "survive by default"): a bearer JWT whose header names an algorithm that does
not fit the pinned key, or a header that is not one, is a 401 like any other bad token (audited, counted
against the client's failure limit), never a 500; and no 401 answer, whichever path gives it (bearer tokens,
signed events, the /ui sign-in and its OIDC login), shows Python internals.

Given / When / Then in each test.
"""

from __future__ import annotations

import base64
import html
import json
import re
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from fastapi.testclient import TestClient
from oidc_provider import Provider
from test_server_api import problem_of

from sealflow.runtime.config import RuntimeConfig
from sealflow.server.app import create_app
from sealflow.server.oidc import OidcSettings
from sealflow.server.oidc_login import OidcLoginSettings
from sealflow.server.settings import ServerSettings

ISSUER = "https://id.example.test"
AUDIENCE = "sealflow-api"
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()

#: what must never reach a caller: a traceback, a file or module path, a Python object's repr, an exception
#: or key class name
INTERNALS = re.compile(r"Traceback|File \"|\.py\b|<[A-Za-z_][\w.]* object|\bat 0x[0-9a-f]+|generator|"
                       r"\b\w*(Error|Exception|PublicKey|PrivateKey|Algorithm)\b|"
                       r"\b(sealflow|jwt|cryptography|builtins|fastapi|starlette)\.\w")


def failures(rt) -> list[dict]:
    return [e.detail for e in rt.store.audit(None) if e.event == "auth_failed"]


def assert_no_internals(text: str) -> None:
    found = INTERNALS.search(text)
    assert found is None, f"the answer shows {found.group(0)!r}: {text}"


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def claims(**more) -> dict:
    now = int(time.time())
    return {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "tenant": "acme", "iat": now, "exp": now + 300, **more}


def raw_jwt(header: object, body: object = None, signature: bytes = b"sig") -> str:
    """A compact JWT from any JSON header and body (what an attacker may send: PyJWT would refuse to make it)."""
    return ".".join([b64(json.dumps(header).encode()), b64(json.dumps(claims() if body is None else body).encode()),
                     b64(signature)])


def hmac_with_public_key(keys) -> str:
    """The classic confusion: HS256 keyed with the pinned RSA public key's PEM."""
    forged = jwt.api_jws.PyJWS()
    forged._algorithms["HS256"].prepare_key = lambda key: key
    pem = keys[0].public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return forged.encode(json.dumps(claims()).encode(), pem, algorithm="HS256", headers={"kid": "k1"})


#: name -> (the token, given the test's RSA keys; the reason the 401 must give)
HOSTILE = {
    "ES256 header against the pinned RSA key": (
        lambda keys: jwt.encode(claims(), EC_KEY, algorithm="ES256", headers={"kid": "k1"}), "algorithm-key-mismatch"),
    "EdDSA header against the pinned RSA key": (
        lambda keys: jwt.encode(claims(), ED_KEY, algorithm="EdDSA", headers={"kid": "k1"}), "algorithm-key-mismatch"),
    "alg none": (lambda keys: jwt.encode(claims(), None, algorithm="none", headers={"kid": "k1"}),
                 "algorithm-not-allowed"),
    "HS256 keyed with the RSA public key": (hmac_with_public_key, "algorithm-not-allowed"),
    "an algorithm not on the allow-list (RS384)": (
        lambda keys: jwt.encode(claims(), keys[0], algorithm="RS384", headers={"kid": "k1"}), "algorithm-not-allowed"),
    "alg that is a list": (lambda keys: raw_jwt({"alg": ["RS256"], "kid": "k1"}), "algorithm-not-allowed"),
    "no alg": (lambda keys: raw_jwt({"kid": "k1", "typ": "JWT"}), "algorithm-not-allowed"),
    "kid that is a list": (lambda keys: raw_jwt({"alg": "RS256", "kid": ["k1"]}), "malformed"),
    "kid that is an object": (lambda keys: raw_jwt({"alg": "ES256", "kid": {"$ne": ""}}), "malformed"),
    "an unknown critical extension": (
        lambda keys: jwt.encode(claims(), keys[0], algorithm="RS256", headers={"kid": "k1", "crit": ["exp2"]}),
        "malformed"),
    "a header that is not JSON": (lambda keys: b64(b"{alg") + "." + b64(b"{}") + ".c2ln", "malformed"),
    "a header that is a JSON list": (lambda keys: raw_jwt(["RS256"]), "malformed"),
    "a body that is not a JSON object": (
        lambda keys: jwt.api_jws.encode(b"[1, 2]", keys[0], algorithm="RS256", headers={"kid": "k1"}), "invalid-jwt"),
    "exp that is not a number": (
        lambda keys: jwt.api_jws.encode(json.dumps(claims(exp="tomorrow")).encode(), keys[0], algorithm="RS256",
                                        headers={"kid": "k1"}), "invalid-jwt"),
}


@pytest.fixture
def oidc_client(rt, known, jwks):
    settings = ServerSettings(rate=0, oidc=OidcSettings(issuer=ISSUER, audience=AUDIENCE, jwks_path=str(jwks),
                                                        leeway=5))
    with TestClient(create_app(settings, rt), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_jwt_whose_header_does_not_fit_the_key_is_a_401_audited_without_internals(oidc_client, keys, rt, case):
    # Given a bearer JWT presented to a server pinning one RSA key (kid k1)
    make, reason = HOSTILE[case]
    token = make(keys)
    # When it is sent
    got = oidc_client.get("/v1/runs", headers={"Authorization": f"Bearer {token}"})
    # Then it is a 401 problem with a challenge and a stable reason, audited as a failed OIDC authentication
    body = problem_of(got, "unauthenticated", 401)
    assert body["reason"] == reason and got.headers["www-authenticate"].startswith("Bearer")
    assert failures(rt)[-1] == {"reason": reason, "method": "oidc", "client": "testclient", "path": "/v1/runs"}
    # And the answer shows no Python internals
    assert_no_internals(got.text)


def test_a_flood_of_mismatched_jwts_is_rate_limited_like_any_bad_token(oidc_client, rt):
    # Given an ES256 JWT naming the pinned RSA key
    token = jwt.encode(claims(), EC_KEY, algorithm="ES256", headers={"kid": "k1"})
    # When one client sends it 15 times
    codes = [oidc_client.get("/v1/runs", headers={"Authorization": f"Bearer {token}"}).status_code
             for _ in range(15)]
    # Then the first 10 are 401 and audited, the rest refused as rate-limited without an audit event each
    assert codes[:10] == [401] * 10 and set(codes[10:]) == {429}
    assert [f["reason"] for f in failures(rt)] == ["algorithm-key-mismatch"] * 10


def test_each_pinned_key_verifies_only_its_own_algorithms(rt, known, keys, tmp_path):
    # Given a JWKS pinning an RSA key declared for RS256 only (k1) and an EC P-256 key (k2), and an allow-list
    # of RS256, PS256 and ES256
    rsa_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(keys[0].public_key()))
    ec_jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(EC_KEY.public_key()))
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [{**rsa_jwk, "kid": "k1", "alg": "RS256"}, {**ec_jwk, "kid": "k2"}]}))
    settings = ServerSettings(rate=0, oidc=OidcSettings(ISSUER, AUDIENCE, str(path),
                                                        algorithms=("RS256", "PS256", "ES256")))
    with TestClient(create_app(settings, rt), raise_server_exceptions=False) as client:
        def get(token: str):
            return client.get("/v1/runs", headers={"Authorization": f"Bearer {token}"})

        # When each key signs with its own algorithm / Then both are accepted
        assert get(jwt.encode(claims(), keys[0], algorithm="RS256", headers={"kid": "k1"})).status_code == 200
        assert get(jwt.encode(claims(), EC_KEY, algorithm="ES256", headers={"kid": "k2"})).status_code == 200
        # When the RSA key signs PS256, an allowed algorithm its JWK does not declare / Then it is refused
        ps = get(jwt.encode(claims(), keys[0], algorithm="PS256", headers={"kid": "k1"}))
        assert problem_of(ps, "unauthenticated", 401)["reason"] == "algorithm-key-mismatch"
        # When an RS256 token names the EC key / Then it is refused the same way, not a 500
        crossed = get(jwt.encode(claims(), keys[0], algorithm="RS256", headers={"kid": "k2"}))
        assert problem_of(crossed, "unauthenticated", 401)["reason"] == "algorithm-key-mismatch"
        assert_no_internals(ps.text + crossed.text)


@pytest.mark.parametrize("header", [
    None, "Basic YTpi", "Bearer", "Bearer sf_nope", "Bearer sf_0123456789abcdef_" + "A" * 43,
    "Bearer not-a-jwt-at-all", "Bearer a.b.c", "Bearer ..", "Bearer " + "x" * 5000, "Bearer \u00e9\u00e9.\u00e9.\u00e9",
])
def test_no_401_of_a_bearer_credential_shows_python_internals(oidc_client, header):
    # Given a missing, mis-schemed, unknown or garbled credential
    headers = {} if header is None else {"Authorization": header.encode("latin-1")}
    # When it is sent / Then it is a 401 whose body shows no internals
    got = oidc_client.get("/v1/runs", headers=headers)
    problem_of(got, "unauthenticated", 401)
    assert_no_internals(got.text)


def test_no_401_without_an_oidc_issuer_shows_python_internals(client, keys):
    # Given a server without OIDC, and a JWT whose header names a key type it has never heard of
    token = jwt.encode(claims(), EC_KEY, algorithm="ES256", headers={"kid": "k1"})
    # When it is sent / Then it is a 401 saying no issuer is configured, with no internals
    got = client.get("/v1/runs", headers={"Authorization": f"Bearer {token}"})
    assert problem_of(got, "unauthenticated", 401)["reason"] == "malformed"
    assert_no_internals(got.text)


EVENT_SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


@pytest.mark.parametrize("signature", [b"v1,\xe9\xe9\xe9", b"v1,abc \xff", b"v9,\xe9", b"v1,"])
def test_an_event_whose_signature_is_not_ascii_is_a_401_not_a_500(rt, monkeypatch, signature):
    # Given an event source with a signing secret
    monkeypatch.setenv("SEALFLOW_SECRET_HOSTILE_EVENTS", EVENT_SECRET)
    rt.config = RuntimeConfig(extra={"events": {"sources": {"crm": {"secret": {"secret": "HOSTILE_EVENTS"},
                                                                    "tenant": "acme"}}}})
    with TestClient(create_app(ServerSettings(rate=0), rt), raise_server_exceptions=False) as client:
        # When a delivery arrives whose signature header holds bytes outside ASCII
        got = client.post("/v1/events/crm", content=b'{"type": "x", "data": {}}', headers={
            "webhook-id": "msg_1", "webhook-timestamp": str(int(time.time())), "webhook-signature": signature,
            "content-type": "application/json"})
    # Then it is refused as unauthenticated, without internals
    problem_of(got, "unauthenticated", 401)
    assert_no_internals(got.text)


def test_a_ui_sign_in_with_a_bad_token_shows_no_python_internals(client):
    # Given the sign-in form's CSRF cookie
    page = client.get("/ui/signin")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    # When a garbled token is posted
    got = client.post("/ui/signin", data={"csrf_token": csrf, "token": "sf_\u00e9" + "x" * 300})
    # Then the page refuses it (401) without internals
    assert got.status_code == 401 and "sign-in refused" in got.text
    assert_no_internals(html.unescape(got.text))


@pytest.mark.parametrize("algorithm, key", [("ES256", EC_KEY), ("EdDSA", ED_KEY)])
def test_an_id_token_whose_algorithm_does_not_fit_the_pinned_key_is_refused_not_a_500(rt, known, keys, jwks,
                                                                                      algorithm, key):
    # Given an identity provider that signs its ID tokens with an algorithm its pinned (RSA) key cannot verify
    with Provider(keys[0], client_id="sealflow-ui") as provider:
        provider.key_for_tokens, provider.algorithm_for_tokens = key, algorithm
        settings = ServerSettings(rate=0, oidc=OidcSettings(issuer=provider.url, audience=AUDIENCE,
                                                            jwks_path=str(jwks)),
                                  oidc_login=OidcLoginSettings(client_id="sealflow-ui",
                                                               redirect_uri="http://testserver/ui/oidc/callback"))
        with TestClient(create_app(settings, rt), raise_server_exceptions=False) as client:
            # When a person signs in through it
            started = client.get("/ui/oidc/login", follow_redirects=False)
            import httpx

            back = httpx.get(started.headers["location"], follow_redirects=False).headers["location"]
            done = client.get(back.removeprefix("http://testserver"))
    # Then the sign-in is refused (401), audited, and the page shows no internals
    assert done.status_code == 401, done.text
    assert failures(rt)[-1]["reason"] == "algorithm-key-mismatch" and failures(rt)[-1]["method"] == "oidc"
    assert_no_internals(html.unescape(done.text))
