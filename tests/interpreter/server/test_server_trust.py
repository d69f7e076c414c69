"""With a trust policy the API runs only signed definitions: signed bytes verified here and recorded in the
registry, or a registered name; tampered bytes and unregistered names are refused."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from test_server_api import problem_of

from sealflow.dsl.trust import load_policy, signing
from sealflow.server.app import create_app
from sealflow.server.settings import ServerSettings

HELLO = """\
sealflow: 1
name: hello
version: 1
owner: team:test
steps:
  - {id: done, succeed: {}}
"""


@pytest.fixture
def signed(tmp_path):
    key = signing.generate_key()
    (tmp_path / "k1.pub.pem").write_bytes(signing.public_pem(key.public_key()))
    (tmp_path / "trust.yaml").write_text("keys:\n  - {id: k1, public_key: k1.pub.pem}\n")
    envelope = signing.to_json(signing.sign(HELLO.encode(), key, keyid="k1")).decode()
    return load_policy(tmp_path / "trust.yaml"), envelope


@pytest.fixture
def trusted(rt, signed, mint):
    with TestClient(create_app(ServerSettings(rate=0), rt, trust=signed[0]), raise_server_exceptions=False) as c:
        yield c, mint()


def test_signed_bytes_are_verified_recorded_and_then_runnable_by_name(trusted, signed, rt):
    client, alice = trusted
    first = client.post("/v1/runs", json={"definition": HELLO, "signature": signed[1]}, headers=alice)
    assert first.status_code == 201, first.text
    assert rt.store.get_run(first.json()["run_id"]).signer.startswith("key:")
    (record,) = rt.store.definitions("hello")
    # the recorded signer is the key's fingerprint, never the policy's label for it
    assert record.version == 1 and record.signer.startswith("key:") and record.signer != "key:k1"
    again = client.post("/v1/runs", json={"workflow": "hello"}, headers=alice)
    assert again.status_code == 201 and rt.store.get_run(again.json()["run_id"]).signer == record.signer


def test_tampered_bytes_and_unregistered_names_are_refused(trusted, signed):
    client, alice = trusted
    tampered = client.post("/v1/runs", json={"definition": HELLO.replace("team:test", "team:evil"),
                                             "signature": signed[1]}, headers=alice)
    assert problem_of(tampered, "signature-refused", 422)["reason"]
    problem_of(client.post("/v1/runs", json={"workflow": "approve-flow"}, headers=alice), "not-found", 404)
    problem_of(client.post("/v1/runs", json={"workflow": "hello", "definition": HELLO}, headers=alice),
               "invalid-request", 422)


def test_without_a_trust_policy_signed_bytes_are_refused(client, mint, signed):
    got = client.post("/v1/runs", json={"definition": HELLO, "signature": signed[1]}, headers=mint())
    assert "no trust policy" in problem_of(got, "invalid-request", 422)["detail"]
