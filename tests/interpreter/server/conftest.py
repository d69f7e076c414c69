"""Fixtures of the HTTP API tests: a secured runtime (the acme/globex access policy), an app on it, tokens."""

from __future__ import annotations

import json

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient
from interp_helpers import S, approval, make_plan

from sealflow.execution.actions import action
from sealflow.server import tokens
from sealflow.server.app import create_app
from sealflow.server.settings import ServerSettings


def approval_plan(name: str = "approve-flow", version: int = 1):
    return make_plan(S("ask", "approval", approval=approval(show="input")),
                     S("act", "action", action="t.note", args={"text": "approved"}),
                     output="${{ steps.ask.output }}", name=name, version=version)


@pytest.fixture
def notes(registry):
    calls = []

    @action("t.note", registry=registry, effect="write")
    def note(ctx, text="", value=0):
        calls.append(text)
        return {"text": text, "value": value}

    return calls


@pytest.fixture
def known(rt, notes):
    """The store knows ``approve-flow`` v1 (a plan submitted to it once): development mode submits it by name."""
    plan = approval_plan()
    rt.store.put_plan(plan.digest, plan.name, plan.version, plan.to_json(indent=None), rt.clock.now())
    return plan


@pytest.fixture(scope="module")
def keys():
    """Two RSA keys: the first is pinned in :func:`jwks` (kid ``k1``), the second is not."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048), \
        rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def jwks(tmp_path, keys):
    """The pinned JWKS file of OIDC: the first key of :func:`keys`, kid ``k1``."""
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(keys[0].public_key()))
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}))
    return path


@pytest.fixture
def mint(rt):
    """``mint(principal, tenant, expires_in=None)`` -> the Authorization header of a new API token."""

    def make(principal: str = "user:alice", tenant: str = "acme", expires_in: float | None = None) -> dict:
        text, _ = tokens.create(rt.store, principal, tenant, rt.clock.now(), actor="user:root", expires_in=expires_in)
        return {"Authorization": f"Bearer {text}"}

    return make


@pytest.fixture
def operator(policy):
    """The access policy with ``user:root`` as its operator (acme's and globex's members as before)."""
    import yaml

    policy.path.write_text(yaml.safe_dump({"operators": ["user:root"], "tenants": policy.tenants}))
    return "user:root"


@pytest.fixture
def settings():
    return ServerSettings(rate=0)


@pytest.fixture
def client(rt, known, settings):
    with TestClient(create_app(settings, rt), raise_server_exceptions=False) as c:
        yield c
