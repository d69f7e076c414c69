"""Sigstore bundles verified fully offline against pinned trusted roots, with real public bundles.

The bundles and roots are public data shipped in tests/fixtures/sigstore/ (see its README.md);
the production bundle signs the rfc8785 0.1.2 wheel, fetched once from the package registry into
.sealflow/test-cache/ (or taken from $SEALFLOW_TEST_WHEELS) and checked by digest.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sealflow.dsl.trust import Refused, load_policy, verify_bytes, verify_file, verify_sigstore

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "sigstore"
CACHE = ROOT / ".sealflow" / "test-cache"
WHEEL = "rfc8785-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "c4e92e9ecc828bef2aa7dba1de8ac983511f7532a0df11c770d39099a25cf201"

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
STAGING_IDENTITY = "jku@goto.fi"
STAGING_ISSUER = "https://github.com/login/oauth"


@pytest.fixture(scope="session")
def fixtures() -> Path:
    if not (FIXTURES / "README.md").is_file():
        pytest.skip(f"the Sigstore fixtures folder {FIXTURES} is absent "
                    "(it ships in tests/fixtures/sigstore: is the clone complete?)")
    pytest.importorskip("sigstore", reason="sigstore is not installed: pip install 'sealflow[sigstore]'")
    return FIXTURES


@pytest.fixture(scope="session")
def wheel(fixtures) -> Path:
    """The rfc8785 0.1.2 wheel that the production bundle signs, checked by digest."""
    given = os.environ.get("SEALFLOW_TEST_WHEELS")
    folder = Path(given) if given else CACHE
    path = folder / WHEEL
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                   "rfc8785==0.1.2", "-d", str(folder)], capture_output=True, text=True, timeout=180)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"cannot fetch {WHEEL} from the package registry: {exc}")
        if proc.returncode != 0 or not path.is_file():
            pytest.skip(f"cannot fetch {WHEEL} from the package registry (pip download failed: "
                        f"{proc.stderr.strip().splitlines()[-1:] or proc.returncode})")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == WHEEL_SHA256, f"{path} has sha256 {digest}, expected {WHEEL_SHA256}: delete it and rerun"
    return path


def policy_for(tmp_path: Path, root: str, identities: str):
    """A trust policy pinning ``root`` (a fixture root file) and listing ``identities`` (YAML lines)."""
    path = tmp_path / "policy.yaml"
    path.write_text(f"sigstore:\n  trusted_root: {FIXTURES / root}\n  identities:\n"
                    + textwrap.indent(textwrap.dedent(identities), "    "))
    return load_policy(path)


def staging_policy(tmp_path, identity=STAGING_IDENTITY, issuer=STAGING_ISSUER, root="staging_trusted_root.json"):
    return policy_for(tmp_path, root, f"- {{issuer: {issuer}, identity: {identity}}}\n")


def github_policy(tmp_path, repository="trailofbits/rfc8785.py", ref="refs/tags/v0.1.2", issuer=GITHUB_ISSUER,
                  workflow=None, root="production_trusted_root.json"):
    line = f"- {{issuer: {issuer}, repository: {repository}, ref: {ref}"
    line += f", workflow: {workflow}}}\n" if workflow else "}\n"
    return policy_for(tmp_path, root, line)


def refusal(fn, *args, **kwargs) -> Refused:
    with pytest.raises(Refused) as info:
        fn(*args, **kwargs)
    return info.value


# ---------------------------------------------------------------- the staging bundle (an email identity)

@pytest.fixture
def staging(fixtures):
    return ((fixtures / "staging-rekor-v2.txt").read_bytes(),
            (fixtures / "staging-rekor-v2.txt.sigstore.json").read_bytes())


def test_given_the_staging_bundle_when_verified_offline_against_the_staging_root_then_the_signer_is_named(
        tmp_path, staging):
    data, bundle = staging
    claims = verify_sigstore(data, bundle, staging_policy(tmp_path))
    assert claims == {"identity": STAGING_IDENTITY, "issuer": STAGING_ISSUER}


@pytest.mark.parametrize("tamper", [
    lambda b: b + b"x",                         # one appended byte
    lambda b: bytes([b[0] ^ 0x01]) + b[1:],     # one flipped bit
    lambda b: b[:-1],                           # one byte fewer
])
def test_given_a_tampered_artifact_then_refused_as_tampered(tmp_path, staging, tamper):
    data, bundle = staging
    error = refusal(verify_sigstore, tamper(data), bundle, staging_policy(tmp_path))
    assert error.reason == "tampered" and "message digest mismatch" in error.message


@pytest.mark.parametrize("identity, issuer", [
    ("someone@goto.fi", STAGING_ISSUER),
    (STAGING_IDENTITY, "https://accounts.google.com"),
])
def test_given_the_wrong_identity_or_issuer_then_refused_naming_the_actual_signer(tmp_path, staging, identity,
                                                                                   issuer):
    data, bundle = staging
    error = refusal(verify_sigstore, data, bundle, staging_policy(tmp_path, identity, issuer))
    assert error.reason == "wrong-identity"
    assert f"identity {STAGING_IDENTITY}, issuer {STAGING_ISSUER}" in error.message


def test_given_the_staging_bundle_against_the_production_root_then_refused_as_wrong_root(tmp_path, staging):
    data, bundle = staging
    error = refusal(verify_sigstore, data, bundle, staging_policy(tmp_path, root="production_trusted_root.json"))
    assert error.reason == "wrong-root" and "production_trusted_root.json" in error.message


def _mutate(bundle: bytes, fn) -> bytes:
    body = json.loads(bundle)
    fn(body)
    return json.dumps(body).encode()


def _break_certificate(body: dict) -> None:
    cert = body["verificationMaterial"].get("certificate") or body["verificationMaterial"]["x509CertificateChain"][
        "certificates"][0]
    cert["rawBytes"] = base64.b64encode(b"not a certificate").decode()


@pytest.mark.parametrize("make", [
    lambda b: b"not json at all",
    lambda b: b"{}",
    lambda b: b"[]",
    lambda b: _mutate(b, lambda body: body.pop("verificationMaterial")),
    lambda b: _mutate(b, lambda body: body.__setitem__("mediaType", "application/vnd.dev.sigstore.bundle.v9+json")),
    lambda b: _mutate(b, _break_certificate),
])
def test_given_a_malformed_bundle_then_a_clear_refusal_never_a_traceback(tmp_path, staging, make):
    data, bundle = staging
    error = refusal(verify_sigstore, data, make(bundle), staging_policy(tmp_path))
    assert error.reason == "malformed-bundle" and error.message.startswith(("malformed", "the Sigstore bundle"))


def test_given_a_trusted_root_that_is_not_a_root_then_refused_as_a_bad_policy(tmp_path, staging):
    data, bundle = staging
    (tmp_path / "root.json").write_text('{"mediaType": "nonsense"}')
    (tmp_path / "policy.yaml").write_text(
        f"sigstore: {{trusted_root: root.json, identities: [{{issuer: {STAGING_ISSUER}, identity: x@y.z}}]}}\n")
    error = refusal(verify_sigstore, data, bundle, load_policy(tmp_path / "policy.yaml"))
    assert error.reason == "bad-policy" and "root.json cannot be used" in error.message


def test_given_a_dsse_bundle_of_another_payload_type_then_refused_as_wrong_payload_type(tmp_path, fixtures):
    # The staging DSSE bundle holds an in-toto statement, signed by the conformance beacon workflow
    bundle = (fixtures / "a.dsse.staging-rekor-v2.txt.sigstore.json").read_bytes()
    policy = policy_for(tmp_path, "staging_trusted_root.json", f"""\
        - issuer: {GITHUB_ISSUER}
          repository: sigstore-conformance/extremely-dangerous-public-oidc-beacon
          ref: refs/heads/main
        """)
    data = (fixtures / "a.dsse.staging-rekor-v2.txt").read_bytes()
    error = refusal(verify_sigstore, data, bundle, policy)
    assert error.reason == "wrong-payload-type" and "application/vnd.in-toto+json" in error.message


def test_the_signature_is_checked_before_the_definition(tmp_path, staging, fixtures):
    # Given a validly signed artifact that is not a definition, Then the refusal comes from the definition check
    data, bundle = staging
    error = refusal(verify_bytes, data, "staging-rekor-v2.txt", bundle, staging_policy(tmp_path))
    assert error.reason == "invalid-definition"
    # And through verify_file with an explicit bundle path
    error = refusal(verify_file, fixtures / "staging-rekor-v2.txt", staging_policy(tmp_path),
                    bundle=fixtures / "staging-rekor-v2.txt.sigstore.json")
    assert error.reason == "invalid-definition"


def test_a_sigstore_bundle_is_refused_when_the_policy_has_no_sigstore_section(tmp_path, staging):
    data, bundle = staging
    from sealflow.dsl.trust import signing

    (tmp_path / "k.pub.pem").write_bytes(signing.public_pem(signing.generate_key().public_key()))
    (tmp_path / "policy.yaml").write_text("keys: [{id: k, public_key: k.pub.pem}]\n")
    error = refusal(verify_sigstore, data, bundle, load_policy(tmp_path / "policy.yaml"))
    assert error.reason == "unknown-signer" and "no sigstore section" in error.message


# ---------------------------------------------------------------- the production bundle (a GitHub Actions identity)

@pytest.fixture
def production(fixtures, wheel):
    return wheel.read_bytes(), (fixtures / "bundle_v3_github.whl.sigstore").read_bytes()


def test_given_the_production_bundle_when_verified_with_a_github_identity_then_repository_and_ref_are_named(
        tmp_path, production):
    data, bundle = production
    claims = verify_sigstore(data, bundle, github_policy(tmp_path))
    assert claims == {
        "identity": "https://github.com/trailofbits/rfc8785.py/.github/workflows/release.yml@refs/tags/v0.1.2",
        "issuer": GITHUB_ISSUER, "repository": "trailofbits/rfc8785.py", "ref": "refs/tags/v0.1.2"}
    # the optional workflow narrows it to the signing workflow file
    verify_sigstore(data, bundle, github_policy(tmp_path, workflow=".github/workflows/release.yml"))


@pytest.mark.parametrize("override", [
    {"repository": "trailofbits/other.py"},
    {"ref": "refs/heads/main"},
    {"issuer": "https://gitlab.com"},
    {"workflow": ".github/workflows/other.yml"},
])
def test_given_a_wrong_repository_ref_issuer_or_workflow_then_refused_as_wrong_identity(tmp_path, production,
                                                                                        override):
    data, bundle = production
    error = refusal(verify_sigstore, data, bundle, github_policy(tmp_path, **override))
    assert error.reason == "wrong-identity" and "repository trailofbits/rfc8785.py" in error.message


def test_given_the_production_bundle_against_the_staging_root_then_refused_as_wrong_root(tmp_path, production):
    data, bundle = production
    error = refusal(verify_sigstore, data, bundle, github_policy(tmp_path, root="staging_trusted_root.json"))
    assert error.reason == "wrong-root"


def test_given_a_tampered_wheel_then_refused_as_tampered(tmp_path, production):
    data, bundle = production
    assert refusal(verify_sigstore, data + b"\0", bundle, github_policy(tmp_path)).reason == "tampered"


def test_one_of_several_identities_is_enough(tmp_path, production):
    data, bundle = production
    policy = policy_for(tmp_path, "production_trusted_root.json", f"""\
        - {{issuer: {STAGING_ISSUER}, identity: {STAGING_IDENTITY}}}
        - {{issuer: {GITHUB_ISSUER}, repository: trailofbits/rfc8785.py, ref: refs/tags/v0.1.2}}
        """)
    assert verify_sigstore(data, bundle, policy)["repository"] == "trailofbits/rfc8785.py"


def test_without_the_sigstore_package_a_bundle_is_a_clear_refusal(tmp_path, monkeypatch):
    from sealflow.dsl.trust import Identity, TrustPolicy

    # Given a process where sigstore cannot be imported (it is an optional extra)
    for name in [m for m in sys.modules if m == "sigstore" or m.startswith("sigstore.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sigstore", None)
    policy = TrustPolicy("p", trusted_root=tmp_path / "root.json",
                         identities=(Identity(issuer=STAGING_ISSUER, identity=STAGING_IDENTITY),))
    # When a Sigstore bundle is verified, Then it is refused, saying what to install
    error = refusal(verify_sigstore, b"x", b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}', policy)
    assert error.reason == "sigstore-missing" and "sealflow[sigstore]" in error.hint
