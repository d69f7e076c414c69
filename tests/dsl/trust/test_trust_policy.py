"""The trust policy file: its format, located errors, and the namespace rule."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from sealflow import schemas
from sealflow.dsl.trust import (
    POLICY_CODES,
    REASONS,
    Identity,
    PolicyError,
    TrustPolicy,
    load_policy,
    namespace_of,
    signing,
)

ROOT = Path(__file__).resolve().parents[3]

TRUST_MD_EXAMPLE = """\
sigstore:
  trusted_root: trust/trusted_root.json      # pinned; refreshed by CI, never fetched at run time
  identities:
    - issuer: https://token.actions.githubusercontent.com
      repository: acme/workflows
      ref: refs/heads/main
      workflow: .github/workflows/sign.yml     # optional
keys:                                          # offline Ed25519 signers, optional
  - id: ops-airgap-2026
    public_key: trust/ops-airgap-2026.pub.pem
namespaces: {sales: [sigstore], ops: [ops-airgap-2026]}   # optional narrowing
"""


@pytest.fixture
def folder(tmp_path) -> Path:
    """A repository folder with trust/ holding a (placeholder) root and a real public key."""
    trust = tmp_path / "trust"
    trust.mkdir()
    (trust / "trusted_root.json").write_text("{}")  # load_policy only checks that it is there
    (trust / "ops-airgap-2026.pub.pem").write_bytes(signing.public_pem(signing.generate_key().public_key()))
    return tmp_path


def write_policy(folder: Path, text: str, name: str = "policy.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def problems(path: Path) -> list[tuple[str, int, int]]:
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    return [(d.code, d.location.line, d.location.column) for d in info.value.diagnostics]


def messages(path: Path) -> list[str]:
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    return [d.format() for d in info.value.diagnostics]


# ---------------------------------------------------------------- a good policy

def test_given_the_example_of_trust_md_when_loaded_then_every_part_is_there(folder, monkeypatch, tmp_path):
    path = write_policy(folder, TRUST_MD_EXAMPLE)
    monkeypatch.chdir(tmp_path.parent)  # paths are relative to the policy file, not to the current folder
    policy = load_policy(path)
    assert policy.trusted_root == folder / "trust" / "trusted_root.json"
    [ident] = policy.identities
    assert ident == Identity(issuer="https://token.actions.githubusercontent.com", repository="acme/workflows",
                             ref="refs/heads/main", workflow=".github/workflows/sign.yml")
    assert ident.san == "https://github.com/acme/workflows/.github/workflows/sign.yml@refs/heads/main"
    [key] = policy.keys
    assert key.id == "ops-airgap-2026" and len(key.fingerprint) == 64 and key.expires is None
    assert policy.namespaces == {"sales": ("sigstore",), "ops": ("ops-airgap-2026",)}


def test_a_keys_only_policy_and_a_plain_identity_policy_both_load(folder):
    assert load_policy(write_policy(folder, """\
        keys: [{id: k1, public_key: trust/ops-airgap-2026.pub.pem, expires: 2026-12-31}]
        """)).keys[0].expires_text == "2026-12-31"
    policy = load_policy(write_policy(folder, """\
        sigstore:
          trusted_root: trust/trusted_root.json
          identities: [{issuer: https://github.com/login/oauth, identity: jku@goto.fi}]
        """))
    assert policy.identities[0].san == "jku@goto.fi" and policy.keys == () and policy.namespaces is None


def test_a_workflow_may_be_given_as_a_full_certificate_identity():
    ident = Identity(issuer="https://token.actions.githubusercontent.com", repository="acme/w",
                     ref="refs/heads/main",
                     workflow="https://github.com/acme/shared/.github/workflows/s.yml@refs/tags/v1")
    assert ident.san == "https://github.com/acme/shared/.github/workflows/s.yml@refs/tags/v1"


def test_expiry_dates_and_timestamps(folder):
    policy = load_policy(write_policy(folder, """\
        keys:
          - {id: a, public_key: trust/ops-airgap-2026.pub.pem, expires: 2026-12-31}
          - {id: b, public_key: trust/ops-airgap-2026.pub.pem, expires: "2026-12-31T18:00:00+02:00"}
        """))
    a, b = policy.keys
    assert a.expires.isoformat() == "2027-01-01T00:00:00+00:00"  # valid through the day, UTC
    assert b.expires.isoformat() == "2026-12-31T18:00:00+02:00"


# ---------------------------------------------------------------- the namespace rule

@pytest.mark.parametrize("owner, namespace", [
    ("team:sales", "sales"), ("team:sales-platform", "sales-platform"), ("user:alice@example.com", "alice@example.com"),
    ("service:a:b", "a:b"),
])
def test_the_namespace_of_a_definition_is_the_name_part_of_its_owner(owner, namespace):
    assert namespace_of(owner) == namespace


def test_namespaces_narrow_and_star_covers_the_rest():
    unrestricted = TrustPolicy("p")
    assert unrestricted.allowed_signers("sales") is None
    narrowed = TrustPolicy("p", namespaces={"sales": ("sigstore",), "*": ("ops",)})
    assert narrowed.allowed_signers("sales") == ("sigstore",)
    assert narrowed.allowed_signers("finance") == ("ops",)
    exhaustive = TrustPolicy("p", namespaces={"sales": ("sigstore",)})
    assert exhaustive.allowed_signers("finance") == ()


# ---------------------------------------------------------------- located errors

def test_schema_errors_are_located_and_all_reported(folder):
    path = write_policy(folder, """\
        sigstore:
          trusted_root: trust/trusted_root.json
          identities:
            - issuer: token.actions.githubusercontent.com
              repository: acme/workflows
              refs: refs/heads/main
        keys:
          - id: Ops Key
            public_key: trust/ops-airgap-2026.pub.pem
            expires: next year
        namespaces: {"team:sales": [sigstore]}
        colour: red
        """)
    assert problems(path) == [("S204", 4, 15), ("S202", 6, 7), ("S204", 8, 9), ("S204", 10, 14), ("S204", 11, 14),
                              ("S202", 12, 1)]
    text = "\n".join(messages(path))
    assert f"{path}:6:7: error[S202]: unknown field 'refs' in sigstore.identities[0]; did you mean 'ref'?" in text
    assert "must be the OIDC issuer URL" in text and "must be a date (2026-12-31" in text


@pytest.mark.parametrize("text, expected", [
    ("- a list\n", ("S203", 1, 1)),
    ("keys: {id: x}\n", ("S203", 1, 7)),
    ("sigstore: {identities: []}\n", ("S201", 1, 11)),
    ("keys: [\n", ("Y101", 2, 1)),
    ("keys: !!python/object:os.system x\n", ("Y104", 1, 7)),
    ("", ("Y112", 1, 1)),
])
def test_malformed_policies_are_located_diagnostics_never_exceptions(folder, text, expected):
    assert problems(write_policy(folder, text))[0] == expected


def test_a_list_instead_of_a_policy_says_policy_not_workflow(folder):
    [message] = messages(write_policy(folder, "- a\n"))
    assert "error[S203]: policy: expected a Sealflow trust policy (map), got list" in message


def test_a_directory_instead_of_a_policy_is_y100(folder):
    (folder / "dir.yaml").mkdir()
    assert problems(folder / "dir.yaml") == [("Y100", 1, 1)]


def test_trust_codes_for_files_keys_namespaces_identities_and_dates(folder):
    (folder / "trust" / "private.pem").write_bytes(signing.private_pem(signing.generate_key()))
    path = write_policy(folder, """\
        sigstore:
          trusted_root: trust/missing_root.json
          identities:
            - {issuer: https://token.actions.githubusercontent.com, repository: acme/workflows}
            - {issuer: https://github.com/login/oauth, identity: a@example.com, ref: refs/heads/main}
            - {issuer: https://github.com/login/oauth}
        keys:
          - {id: ops, public_key: trust/missing.pub.pem}
          - {id: ops, public_key: trust/private.pem}
          - {id: sigstore, public_key: trust/ops-airgap-2026.pub.pem}
          - {id: dated, public_key: trust/ops-airgap-2026.pub.pem, expires: 2026-02-30}
        namespaces: {sales: [sigstore, nobody]}
        """)
    assert problems(path) == [
        ("T701", 2, 17), ("T705", 4, 7), ("T705", 5, 7), ("T705", 6, 7), ("T701", 8, 27), ("T703", 9, 10),
        ("T702", 9, 27), ("T703", 10, 10), ("T706", 11, 69), ("T704", 12, 32)]
    text = "\n".join(messages(path))
    assert "namespace 'sales' names signer 'nobody', which the policy does not define" in text
    assert "not a PEM public key" in text and "BEGIN PRIVATE" not in text


def test_a_policy_with_no_signer_is_t707(folder):
    assert problems(write_policy(folder, "namespaces: {sales: [ops]}\n"))[0] == ("T707", 1, 1)


# ---------------------------------------------------------------- the schema file and the docs

def test_the_policy_schema_is_valid_json_schema_2020_12():
    from jsonschema import Draft202012Validator

    schema = schemas.load("trust-policy.schema.json")
    Draft202012Validator.check_schema(schema)
    assert set(schema["properties"]) == {"sigstore", "keys", "namespaces"}


def test_every_trust_code_and_refusal_reason_is_documented(tmp_path):
    doc = (ROOT / "docs" / "trust.md").read_text(encoding="utf-8")
    for code in POLICY_CODES:
        assert f"`{code}`" in doc, code
    for reason in REASONS:
        assert f"`{reason}`" in doc, reason
    # And the documented policy loads as written, given the files it names
    [block] = re.findall(r"```yaml\n(# trust/policy.yaml.*?)```", doc, re.S)
    (tmp_path / "trusted_root.json").write_text("{}")
    (tmp_path / "ops-airgap-2026.pub.pem").write_bytes(signing.public_pem(signing.generate_key().public_key()))
    policy = load_policy(write_policy(tmp_path, block))
    assert len(policy.identities) == 2 and policy.keys[0].expires_text == "2026-12-31"
    assert policy.allowed_signers("finance") == ("sigstore",)
