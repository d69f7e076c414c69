"""The authentication matrix: no credential, expired, wrong audience, wrong tenant, revoked token, bad
signature; OIDC claims mapped to the principal; open mode announced; failures audited; rate limits."""

from __future__ import annotations

import json
import time

import jwt
import pytest
from fastapi.testclient import TestClient
from test_server_api import problem_of

from sealflow.server import tokens
from sealflow.server.app import create_app
from sealflow.server.oidc import OidcConfigError, OidcSettings, OidcVerifier
from sealflow.server.settings import ServerSettings

ISSUER = "https://id.example.test"
AUDIENCE = "sealflow-api"


def failures(rt) -> list[dict]:
    return [e.detail for e in rt.store.audit(None) if e.event == "auth_failed"]


@pytest.fixture
def oidc_client(rt, known, jwks):
    settings = ServerSettings(rate=0, oidc=OidcSettings(issuer=ISSUER, audience=AUDIENCE, jwks_path=str(jwks),
                                                        leeway=5))
    with TestClient(create_app(settings, rt), raise_server_exceptions=False) as c:
        yield c


def bearer(keys, *, key=0, kid="k1", alg="RS256", **claims) -> dict:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "tenant": "acme", "iat": now, "exp": now + 300, **claims}
    body = {k: v for k, v in body.items() if v is not None}
    return {"Authorization": "Bearer " + jwt.encode(body, keys[key], algorithm=alg, headers={"kid": kid})}


def test_no_credential_is_401_with_a_challenge_and_audited(client, rt):
    got = client.get("/v1/runs")
    body = problem_of(got, "unauthenticated", 401)
    assert got.headers["www-authenticate"].startswith("Bearer") and body["reason"] == "missing"
    assert failures(rt)[-1]["reason"] == "missing"
    problem_of(client.get("/v1/runs", headers={"Authorization": "Basic YTpi"}), "unauthenticated", 401)


def test_an_expired_token_is_refused(client, mint, rt):
    header = mint(expires_in=60)
    assert client.get("/v1/runs", headers=header).status_code == 200
    rt.clock.advance(61)
    assert problem_of(client.get("/v1/runs", headers=header), "unauthenticated", 401)["reason"] == "expired"


def test_a_revoked_token_is_refused_at_the_next_request(client, mint, rt):
    header = mint()
    token_id = header["Authorization"].split("_")[1]
    assert client.get("/v1/runs", headers=header).status_code == 200
    rt.store.revoke_api_token(token_id, rt.clock.now(), actor="user:root")
    assert problem_of(client.get("/v1/runs", headers=header), "unauthenticated", 401)["reason"] == "revoked"
    assert failures(rt)[-1] | {"token": token_id} == failures(rt)[-1]


def test_a_token_with_a_wrong_secret_is_refused_as_unknown(client, mint):
    text = mint()["Authorization"]
    forged = text[:-4] + ("AAAA" if not text.endswith("AAAA") else "BBBB")
    got = client.get("/v1/runs", headers={"Authorization": forged})
    assert problem_of(got, "unauthenticated", 401)["reason"] == "unknown-token"


def test_a_token_of_the_wrong_tenant_sees_nothing_of_another(client, mint):
    run_id = client.post("/v1/runs", json={"workflow": "approve-flow"}, headers=mint()).json()["run_id"]
    problem_of(client.get(f"/v1/runs/{run_id}", headers=mint("user:eve", "globex")), "not-found", 404)


def test_a_non_member_cannot_submit(client, mint):
    got = client.post("/v1/runs", json={"workflow": "approve-flow"}, headers=mint("user:mallory", "acme"))
    problem_of(got, "forbidden", 403)


def test_oidc_a_valid_jwt_maps_its_claims_to_the_principal_and_tenant(oidc_client, keys, rt):
    got = oidc_client.post("/v1/runs", json={"workflow": "approve-flow"}, headers=bearer(keys))
    assert got.status_code == 201, got.text
    run = rt.store.get_run(got.json()["run_id"])
    assert (run.initiator, run.tenant) == ("user:alice", "acme")


@pytest.mark.parametrize(("claims", "reason"), [
    ({"exp": int(time.time()) - 60}, "expired"),
    ({"aud": "someone-else"}, "wrong-audience"),
    ({"iss": "https://evil.example.test"}, "wrong-issuer"),
    ({"key": 1}, "bad-signature"),
    ({"kid": "k9"}, "unknown-key"),
    ({"exp": None}, "missing-claim"),
    ({"tenant": None}, "missing-claim"),
    ({"sub": "bad principal!"}, "bad-principal"),
])
def test_oidc_refuses_a_jwt_that_does_not_hold(oidc_client, keys, rt, claims, reason):
    got = oidc_client.get("/v1/runs", headers=bearer(keys, **claims))
    assert problem_of(got, "unauthenticated", 401)["reason"] == reason
    assert failures(rt)[-1]["method"] == "oidc" and failures(rt)[-1]["reason"] == reason


def test_oidc_refuses_an_hmac_jwt_signed_with_the_public_key(oidc_client, keys, jwks, rt):
    # the classic algorithm confusion: HS256 keyed with the public key's text
    forged = jwt.api_jws.PyJWS()
    forged._algorithms["HS256"].prepare_key = lambda key: key  # let PyJWT sign with a PEM as an HMAC secret
    from cryptography.hazmat.primitives import serialization

    pem = keys[0].public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    payload = json.dumps({"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "tenant": "acme",
                          "exp": int(time.time()) + 60}).encode()
    token = forged.encode(payload, pem, algorithm="HS256", headers={"kid": "k1"})
    got = oidc_client.get("/v1/runs", headers={"Authorization": f"Bearer {token}"})
    assert problem_of(got, "unauthenticated", 401)["reason"] == "algorithm-not-allowed"


def test_oidc_settings_refuse_symmetric_algorithms_and_an_unusable_jwks(tmp_path, jwks):
    with pytest.raises(OidcConfigError, match="not allowed"):
        OidcVerifier(OidcSettings(ISSUER, AUDIENCE, str(jwks), algorithms=("HS256",)))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(OidcConfigError, match="not a usable JWK set"):
        OidcVerifier(OidcSettings(ISSUER, AUDIENCE, str(tmp_path / "bad.json")))


def test_open_mode_serves_anonymous_requests_and_says_so_on_every_response(rt, known):
    with TestClient(create_app(ServerSettings(rate=0, allow_open=True), rt)) as client:
        got = client.get("/v1/runs")
        assert got.status_code == 200 and "development only" in got.headers["sealflow-open-mode"]
        assert "sealflow-open-mode" in client.get("/healthz").headers


def test_a_principal_over_its_rate_limit_gets_429_with_retry_after(rt, known):
    text, _ = tokens.create(rt.store, "user:alice", "acme", rt.clock.now(), actor="user:root")
    with TestClient(create_app(ServerSettings(rate=1, burst=3), rt), raise_server_exceptions=False) as client:
        codes = [client.get("/v1/runs", headers={"Authorization": f"Bearer {text}"}).status_code for _ in range(6)]
        limited = client.get("/v1/runs", headers={"Authorization": f"Bearer {text}"})
    assert codes[:3] == [200, 200, 200] and 429 in codes[3:]
    assert problem_of(limited, "rate-limited", 429) and int(limited.headers["retry-after"]) >= 1


def test_failed_authentications_past_a_burst_are_rate_limited_and_not_audited_each(client, rt):
    codes = [client.get("/v1/runs", headers={"Authorization": "Bearer sf_nope"}).status_code for _ in range(15)]
    assert codes[:10] == [401] * 10 and set(codes[10:]) == {429}
    assert len(failures(rt)) == 10


def test_a_token_is_stored_only_as_a_hash(rt):
    text, record = tokens.create(rt.store, "user:alice", "acme", rt.clock.now(), actor="user:root")
    secret = text.split("_", 2)[2]
    assert secret not in repr(rt.store.api_token(record.id)) and secret not in json.dumps(
        [e.detail for e in rt.store.audit(None)], default=str)
    assert rt.store.api_token(record.id).secret_hash == tokens.digest(secret)


def test_settings_reach_uvicorn_s_worker_processes_whole(jwks):
    # Given settings with OIDC, as `sealflow serve --workers N` passes them to each process
    settings = ServerSettings(store_url="sqlite:///x.db", actions=("a.b",), rate=5, burst=7,
                              oidc=OidcSettings(ISSUER, AUDIENCE, str(jwks), algorithms=("ES256",), leeway=3))
    # Then they read back equal from their JSON
    assert ServerSettings.from_json(settings.to_json()) == settings
