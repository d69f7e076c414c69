"""Offline signing: PAE, Ed25519 keys, DSSE envelopes, and verification of signed definitions against keys."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from sealflow.dsl.trust import Refused, load_policy, signing, verify_bytes, verify_file

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "definitions" / "lead-qualification.v1.yaml"


# ---------------------------------------------------------------- PAE, keys, envelopes

def test_pae_matches_the_dsse_specification():
    # The test vector of the DSSE protocol document
    assert signing.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    assert signing.pae("", b"") == b"DSSEv1 0  0 "
    # lengths are in bytes, not characters
    assert signing.pae("t\u00e9", b"\xff") == "DSSEv1 3 t\u00e9 1 ".encode() + b"\xff"


def test_key_id_is_the_sha256_of_the_public_key_der():
    key = signing.generate_key()
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert signing.key_id(key.public_key()) == hashlib.sha256(der).hexdigest()


def test_keys_round_trip_through_pem():
    key = signing.generate_key()
    private = signing.private_pem(key)
    assert private.startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8
    loaded = signing.load_private_key(private)
    public = signing.load_public_key(signing.public_pem(key.public_key()))
    assert signing.key_id(loaded.public_key()) == signing.key_id(public)


@pytest.mark.parametrize("data, words", [
    (b"garbage", "not a PEM private key"),
    (b"", "not a PEM private key"),
])
def test_unusable_private_keys_are_refused_with_a_reason(data, words):
    with pytest.raises(signing.SigningError, match=words):
        signing.load_private_key(data, "k.pem")


def test_a_non_ed25519_key_is_refused():
    ec_key = ec.generate_private_key(ec.SECP256R1())
    pem = ec_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())
    with pytest.raises(signing.SigningError, match="not an Ed25519 private key"):
        signing.load_private_key(pem)
    with pytest.raises(signing.SigningError, match="not an Ed25519 public key"):
        signing.load_public_key(ec_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(signing.SigningError, match="not a PEM public key"):
        signing.load_public_key(signing.private_pem(signing.generate_key()))


def test_an_envelope_signs_the_exact_bytes_and_its_type():
    key = signing.generate_key()
    payload = EXAMPLE.read_bytes()
    envelope = signing.parse(signing.to_json(signing.sign(payload, key)))
    assert envelope.payload == payload and envelope.payload_type == signing.PAYLOAD_TYPE
    [sig] = envelope.signatures
    assert sig.keyid == signing.key_id(key.public_key())
    assert signing.verify_signature(envelope, sig, key.public_key())
    # the type is covered by the signature too
    retyped = signing.Envelope(payload, "text/plain", envelope.signatures)
    assert not signing.verify_signature(retyped, sig, key.public_key())
    altered = signing.Envelope(payload + b"\n", envelope.payload_type, envelope.signatures)
    assert not signing.verify_signature(altered, sig, key.public_key())
    assert not signing.verify_signature(envelope, sig, signing.generate_key().public_key())


def test_the_envelope_json_is_the_dsse_shape():
    body = json.loads(signing.to_json(signing.sign(b"x: 1\n", signing.generate_key(), keyid="ops")))
    assert set(body) == {"payload", "payloadType", "signatures"}
    assert base64.b64decode(body["payload"]) == b"x: 1\n"
    assert body["signatures"][0]["keyid"] == "ops" and len(base64.b64decode(body["signatures"][0]["sig"])) == 64


def test_url_safe_unpadded_base64_is_accepted_as_dsse_allows():
    key = signing.generate_key()
    envelope = signing.sign(b"\xfb\xff" * 10, key)
    body = {"payload": base64.urlsafe_b64encode(envelope.payload).decode().rstrip("="),
            "payloadType": envelope.payload_type,
            "signatures": [{"sig": base64.urlsafe_b64encode(envelope.signatures[0].sig).decode().rstrip("=")}]}
    parsed = signing.parse(json.dumps(body).encode())
    assert parsed.payload == envelope.payload and parsed.signatures[0].keyid == ""
    assert signing.verify_signature(parsed, parsed.signatures[0], key.public_key())


@pytest.mark.parametrize("raw, words", [
    (b"not json", "not JSON"),
    (b"[1, 2]", "expected a JSON object"),
    (b"{}", "missing payload, payloadType, signatures"),
    (b'{"payload": "eA==", "payloadType": 7, "signatures": []}', "payloadType is not a string"),
    (b'{"payload": "%%%", "payloadType": "t", "signatures": [{"sig": "eA=="}]}', "payload is not valid base64"),
    (b'{"payload": "eA==", "payloadType": "t", "signatures": []}', "non-empty list"),
    (b'{"payload": "eA==", "payloadType": "t", "signatures": [{"keyid": "k"}]}', "has no 'sig'"),
    (b'{"payload": "eA==", "payloadType": "t", "signatures": [{"sig": 5}]}', "not a base64 string"),
    (b'{"payload": "eA==", "payloadType": "t", "signatures": [{"sig": "eA==", "keyid": []}]}', "keyid"),
    (b"\xff\xfe", "not JSON"),
])
def test_malformed_envelopes_are_refused_with_what_is_wrong(raw, words):
    with pytest.raises(signing.SigningError, match=words):
        signing.parse(raw)


# ---------------------------------------------------------------- verifying signed definitions with keys

class Signer:
    """A key pair in a folder, and a trust policy that names it."""

    def __init__(self, folder: Path, key_id: str = "ops-2026", expires: str | None = None,
                 namespaces: str | None = None):
        self.folder, self.id = folder, key_id
        self.key = signing.generate_key()
        (folder / f"{key_id}.pub.pem").write_bytes(signing.public_pem(self.key.public_key()))
        policy = f"keys:\n  - id: {key_id}\n    public_key: {key_id}.pub.pem\n"
        if expires:
            policy += f"    expires: {expires}\n"
        if namespaces:
            policy += f"namespaces: {namespaces}\n"
        self.policy_path = folder / "policy.yaml"
        self.policy_path.write_text(policy)
        self.policy = load_policy(self.policy_path)

    def sign(self, path: Path, *, payload: bytes | None = None, payload_type: str = signing.PAYLOAD_TYPE,
             keyid: str | None = None, key=None) -> Path:
        data = path.read_bytes() if payload is None else payload
        envelope = signing.sign(data, key or self.key, keyid=keyid, payload_type=payload_type)
        out = Path(str(path) + ".dsse.json")
        out.write_bytes(signing.to_json(envelope))
        return out


@pytest.fixture
def definition(tmp_path) -> Path:
    path = tmp_path / "lead-qualification.v1.yaml"
    path.write_bytes(EXAMPLE.read_bytes())
    return path


def refused(path, policy, **kwargs) -> Refused:
    with pytest.raises(Refused) as info:
        verify_file(path, policy, **kwargs)
    return info.value


def test_given_a_signed_definition_when_verified_then_the_signer_name_and_digest_are_reported(tmp_path, definition):
    signer = Signer(tmp_path)
    signer.sign(definition)
    verified = verify_file(definition, signer.policy)
    assert (verified.method, verified.signer, verified.name, verified.version) == \
        ("key", "ops-2026", "lead-qualification", 1)
    assert verified.namespace == "sales-platform" and verified.digest.startswith("sha256:")
    assert verified.details["fingerprint"] == signing.key_id(signer.key.public_key())
    assert "key ops-2026 (sha256 " in verified.who()
    assert verified.signature_file.endswith(".dsse.json")


def test_given_one_changed_byte_when_verified_then_refused_as_tampered(tmp_path, definition):
    signer = Signer(tmp_path)
    signer.sign(definition)
    definition.write_bytes(definition.read_bytes().replace(b"max_attempts: 3", b"max_attempts: 9"))
    assert refused(definition, signer.policy).reason == "tampered"


def test_given_an_altered_envelope_payload_when_verified_then_refused_as_tampered(tmp_path, definition):
    signer = Signer(tmp_path)
    out = signer.sign(definition)
    body = json.loads(out.read_bytes())
    forged = definition.read_bytes() + b"# forged\n"
    body["payload"] = base64.b64encode(forged).decode()
    out.write_text(json.dumps(body))
    definition.write_bytes(forged)
    error = refused(definition, signer.policy)
    assert error.reason == "tampered" and "does not verify" in error.message


def test_given_an_unknown_key_when_verified_then_refused_as_unknown_signer(tmp_path, definition):
    signer = Signer(tmp_path)
    signer.sign(definition, key=signing.generate_key())
    error = refused(definition, signer.policy)
    assert error.reason == "unknown-signer" and "ops-2026" in error.message


def test_the_keyid_is_only_a_hint_a_trusted_key_verifies_whatever_its_keyid_says(tmp_path, definition):
    signer = Signer(tmp_path)
    signer.sign(definition, keyid="somebody-else")
    assert verify_file(definition, signer.policy).signer == "ops-2026"


def test_given_an_expired_key_when_verified_then_refused_as_expired(tmp_path, definition):
    signer = Signer(tmp_path, expires="2026-06-30")
    signer.sign(definition)
    # valid through the last day (UTC), refused from the next
    assert verify_file(definition, signer.policy, now=dt.datetime(2026, 6, 30, 23, 59, tzinfo=dt.UTC))
    error = refused(definition, signer.policy, now=dt.datetime(2026, 7, 1, tzinfo=dt.UTC))
    assert error.reason == "expired-key" and "2026-06-30" in error.message


def test_given_another_payload_type_when_verified_then_refused_as_wrong_payload_type(tmp_path, definition):
    signer = Signer(tmp_path)
    signer.sign(definition, payload_type="application/vnd.in-toto+json")
    error = refused(definition, signer.policy)
    assert error.reason == "wrong-payload-type" and "application/vnd.in-toto+json" in error.message


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"payload": 1}', b"[]", b'{"mediaType": "x"}'])
def test_given_a_malformed_envelope_when_verified_then_refused_as_malformed(tmp_path, definition, content):
    signer = Signer(tmp_path)
    Path(str(definition) + ".dsse.json").write_bytes(content)
    assert refused(definition, signer.policy).reason == "malformed-bundle"


def test_given_no_signature_file_when_verified_then_refused_as_unsigned(tmp_path, definition):
    signer = Signer(tmp_path)
    error = refused(definition, signer.policy)
    assert error.reason == "unsigned" and "lead-qualification.v1.yaml.dsse.json" in error.message


def test_given_a_signer_not_listed_for_the_namespace_then_refused(tmp_path, definition):
    # Given a policy whose '*' entry covers every namespace not listed
    wide = Signer(tmp_path, namespaces="{ops: [ops-2026], '*': [ops-2026]}")
    wide.sign(definition)
    assert verify_file(definition, wide.policy).namespace == "sales-platform"
    # And one that lets the key sign only for namespace ops
    (tmp_path / "narrow").mkdir()
    narrow = Signer(tmp_path / "narrow", namespaces="{ops: [ops-2026]}")
    narrow.sign(definition)
    # When the definition (owner team:sales-platform) is verified, Then refused for its namespace
    error = refused(definition, narrow.policy)
    assert error.reason == "namespace"
    assert "signer ops-2026 not allowed for namespace sales-platform" in error.message


def test_given_signed_bytes_that_are_not_a_valid_definition_then_refused_after_the_signature(tmp_path):
    signer = Signer(tmp_path)
    path = tmp_path / "broken.yaml"
    path.write_bytes(b"sealflow: 1\nname: x\n")
    signer.sign(path)
    error = refused(path, signer.policy)
    assert error.reason == "invalid-definition" and "error[S201]" in error.message


def test_verify_bytes_checks_the_bytes_given_not_a_file_read_again(tmp_path, definition):
    signer = Signer(tmp_path)
    envelope = signer.sign(definition).read_bytes()
    assert verify_bytes(definition.read_bytes(), str(definition), envelope, signer.policy).name == "lead-qualification"
    with pytest.raises(Refused):
        verify_bytes(definition.read_bytes() + b" ", str(definition), envelope, signer.policy)


def test_a_dsse_envelope_is_refused_when_the_policy_lists_no_keys(tmp_path, definition):
    signer = Signer(tmp_path)
    signer.sign(definition)
    policy = load_policy(signer.policy_path)
    policy.keys = ()
    assert refused(definition, policy).reason == "unknown-signer"


def test_with_both_signature_files_the_reason_given_is_about_the_kind_the_policy_accepts(tmp_path, definition):
    # Given a keys-only policy, a Sigstore bundle it cannot use, and a DSSE envelope for other bytes
    signer = Signer(tmp_path)
    signer.sign(definition, payload=b"other bytes")
    bundle = '{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}'
    Path(str(definition) + ".sigstore.json").write_text(bundle)
    # When verified, Then the envelope's refusal is reported, not "the policy has no sigstore section"
    assert refused(definition, signer.policy).reason == "tampered"
    # And a good envelope is enough
    signer.sign(definition)
    assert verify_file(definition, signer.policy).method == "key"
