"""The trust commands (keygen, sign, verify): exit codes 0/1/2, no traceback on garbage, lazy Sigstore, CI templates."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sealflow.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "definitions" / "lead-qualification.v1.yaml"
FIXTURES = ROOT / "tests" / "fixtures" / "sigstore"
CI = ROOT / "tools" / "ci"

AMBIENT = ("GITHUB_ACTIONS", "ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
           "SIGSTORE_IDENTITY_TOKEN", "GITLAB_CI", "BUILDKITE", "CIRCLECI", "GOOGLE_SERVICE_ACCOUNT_NAME")


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.fixture
def workspace(tmp_path, monkeypatch, capsys):
    """A folder with a definition, a key pair made by keygen and a policy naming the key."""
    monkeypatch.chdir(tmp_path)
    definition = tmp_path / "lead-qualification.v1.yaml"
    definition.write_bytes(EXAMPLE.read_bytes())
    assert main(["keygen", "--out", "ops"]) == 0
    capsys.readouterr()
    (tmp_path / "policy.yaml").write_text("keys:\n  - id: ops\n    public_key: ops.pub.pem\n"
                                          "namespaces: {sales-platform: [ops]}\n")
    return tmp_path


# ---------------------------------------------------------------- keygen

def test_keygen_writes_a_0600_private_key_and_a_public_key_and_never_overwrites(capsys, tmp_path):
    prefix = tmp_path / "keys" / "ops"
    prefix.parent.mkdir()
    code, out, _ = run(capsys, "keygen", "--out", prefix)
    assert code == 0 and "key id (sha256 of the public key): " in out
    private, public = Path(f"{prefix}.pem"), Path(f"{prefix}.pub.pem")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    before = private.read_bytes()
    code, _, err = run(capsys, "keygen", "--out", prefix)
    assert code == 1 and "refusing to overwrite" in err and private.read_bytes() == before


def test_keygen_refuses_when_only_the_public_key_exists_and_writes_nothing(capsys, tmp_path):
    Path(f"{tmp_path / 'k'}.pub.pem").write_text("x")
    code, _, err = run(capsys, "keygen", "--out", tmp_path / "k")
    assert code == 1 and not Path(f"{tmp_path / 'k'}.pem").exists()


def test_keygen_into_a_missing_folder_is_a_usage_error_saying_how_to_make_it(capsys, tmp_path):
    code, _, err = run(capsys, "keygen", "--out", tmp_path / "no" / "k")
    assert code == 2 and f"mkdir -p {tmp_path / 'no'}" in err, err


def test_keygen_into_a_missing_folder_inside_a_git_work_tree_is_refused_as_inside_it(capsys, tmp_path):
    # Given a git work tree without a keys/ folder
    (tmp_path / ".git").mkdir()
    # When a key is asked for under keys/, Then it is refused for being in the tree, not for the missing folder
    code, _, err = run(capsys, "keygen", "--out", tmp_path / "keys" / "ops")
    assert code == 1 and "inside the git work tree" in err and "no such folder" not in err, err


# ---------------------------------------------------------------- sign --key and verify, end to end

def test_sign_then_verify_ok_names_the_key(capsys, workspace):
    code, out, _ = run(capsys, "sign", "lead-qualification.v1.yaml", "--key", "ops.pem", "--key-id", "ops")
    assert code == 0 and "lead-qualification.v1.yaml.dsse.json" in out
    envelope = json.loads((workspace / "lead-qualification.v1.yaml.dsse.json").read_text())
    assert envelope["payloadType"] == "application/vnd.sealflow.definition+yaml"
    assert envelope["signatures"][0]["keyid"] == "ops"
    code, out, _ = run(capsys, "verify", "lead-qualification.v1.yaml", "--trust", "policy.yaml")
    assert code == 0
    assert out.startswith("verified: lead-qualification.v1.yaml: lead-qualification v1 (sha256:")
    assert "namespace sales-platform, signed by key ops (sha256 " in out


def test_the_default_keyid_is_the_public_key_fingerprint(capsys, workspace):
    code, keygen_out, _ = run(capsys, "keygen", "--out", "other")
    fingerprint = keygen_out.split("key id (sha256 of the public key): ")[1].split()[0]
    assert run(capsys, "sign", "lead-qualification.v1.yaml", "--key", "other.pem")[0] == 0
    envelope = json.loads((workspace / "lead-qualification.v1.yaml.dsse.json").read_text())
    assert envelope["signatures"][0]["keyid"] == fingerprint
    # a key the policy does not list
    code, out, _ = run(capsys, "verify", "lead-qualification.v1.yaml", "--trust", "policy.yaml")
    assert code == 1 and "refused: lead-qualification.v1.yaml: [unknown-signer]" in out


@pytest.mark.parametrize("edit, reason", [
    (lambda p: p.write_bytes(p.read_bytes() + b"\n"), "tampered"),
    (lambda p: Path(f"{p}.dsse.json").unlink(), "unsigned"),
    (lambda p: Path(f"{p}.dsse.json").write_text('{"payload": "!!", "payloadType": "x", "signatures": []}'),
     "malformed-bundle"),
])
def test_verify_refuses_with_exit_1_and_the_reason(capsys, workspace, edit, reason):
    assert run(capsys, "sign", "lead-qualification.v1.yaml", "--key", "ops.pem")[0] == 0
    edit(workspace / "lead-qualification.v1.yaml")
    code, out, _ = run(capsys, "verify", "lead-qualification.v1.yaml", "--trust", "policy.yaml")
    assert code == 1 and f"refused: lead-qualification.v1.yaml: [{reason}]" in out


def test_verify_json_and_folders(capsys, workspace):
    (workspace / "defs").mkdir()
    (workspace / "lead-qualification.v1.yaml").rename(workspace / "defs" / "lead-qualification.v1.yaml")
    assert run(capsys, "sign", "defs", "--key", "ops.pem", "--key-id", "ops")[0] == 0
    code, out, _ = run(capsys, "verify", "defs", "--trust", "policy.yaml", "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["results"][0]["signer"] == "ops"
    assert report["results"][0]["details"]["key"] == "ops"


def test_verify_with_an_expired_key_is_refused(capsys, workspace):
    (workspace / "policy.yaml").write_text("keys: [{id: ops, public_key: ops.pub.pem, expires: 2020-01-31}]\n")
    assert run(capsys, "sign", "lead-qualification.v1.yaml", "--key", "ops.pem")[0] == 0
    code, out, _ = run(capsys, "verify", "lead-qualification.v1.yaml", "--trust", "policy.yaml")
    assert code == 1 and "[expired-key] signed by key ops, which expired (2020-01-31)" in out


def test_verify_refuses_a_signer_outside_its_namespace(capsys, workspace):
    (workspace / "policy.yaml").write_text("keys: [{id: ops, public_key: ops.pub.pem}]\nnamespaces: {ops: [ops]}\n")
    assert run(capsys, "sign", "lead-qualification.v1.yaml", "--key", "ops.pem")[0] == 0
    code, out, _ = run(capsys, "verify", "lead-qualification.v1.yaml", "--trust", "policy.yaml")
    assert code == 1 and "[namespace] signer ops not allowed for namespace sales-platform" in out


def test_sign_refuses_an_invalid_definition_and_writes_nothing(capsys, workspace):
    bad = workspace / "bad.yaml"
    bad.write_text("sealflow: 1\nname: bad\nversion: 1\nowner: team:x\n"
                   "steps: [{id: a, set: {x: '1'}, next: nowhere}]\n")
    code, out, err = run(capsys, "sign", "lead-qualification.v1.yaml", bad, "--key", "ops.pem")
    assert code == 1 and "error[C401]" in out and "refusing to sign" in err
    assert not list(workspace.glob("*.dsse.json"))


def test_sign_with_a_key_that_is_not_a_private_key_exits_1(capsys, workspace):
    code, _, err = run(capsys, "sign", "lead-qualification.v1.yaml", "--key", "ops.pub.pem")
    assert code == 1 and "not a PEM private key" in err


# ---------------------------------------------------------------- keyless signing without a credential

def test_keyless_sign_without_an_ambient_credential_fails_before_writing_anything(capsys, workspace, monkeypatch):
    pytest.importorskip("sigstore", reason="sigstore is not installed: pip install 'sealflow[sigstore]'")
    for name in AMBIENT:
        monkeypatch.delenv(name, raising=False)
    code, _, err = run(capsys, "sign", "lead-qualification.v1.yaml")
    assert code == 1 and "no ambient OIDC credential" in err and "sign --key" in err
    assert not list(workspace.glob("*.sigstore.json"))


def test_keyless_sign_with_an_unusable_token_fails_before_writing_anything(capsys, workspace, monkeypatch):
    pytest.importorskip("sigstore", reason="sigstore is not installed: pip install 'sealflow[sigstore]'")
    for name in AMBIENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SIGSTORE_IDENTITY_TOKEN", "not.a.jwt")
    code, _, err = run(capsys, "sign", "lead-qualification.v1.yaml")
    assert code == 1 and "the OIDC token cannot be used" in err and "nothing was signed" in err
    assert not list(workspace.glob("*.sigstore.json"))


def test_keyless_sign_validates_first(capsys, workspace, monkeypatch):
    for name in AMBIENT:
        monkeypatch.delenv(name, raising=False)
    (workspace / "bad.yaml").write_text("sealflow: 1\n")
    code, _, err = run(capsys, "sign", "bad.yaml")
    assert code == 1 and "refusing to sign" in err


# ---------------------------------------------------------------- garbage and usage errors

@pytest.mark.parametrize("policy, words", [
    ("keys: [\n", "error[Y101]"),
    ("- a list\n", "error[S203]: policy: expected"),
    ("keys: [{id: ops, public_key: nowhere.pem}]\n", "error[T701]"),
    ("sigstore: {trusted_root: ops.pem, identities: [{issuer: https://x.example}]}\n", "error[T705]"),
])
def test_a_malformed_policy_is_a_refusal_with_located_errors(capsys, workspace, policy, words):
    (workspace / "bad-policy.yaml").write_text(policy)
    code, out, err = run(capsys, "verify", "lead-qualification.v1.yaml", "--trust", "bad-policy.yaml")
    assert code == 1 and words in out and "bad-policy.yaml:" in out and "trust policy" in err


@pytest.mark.parametrize("content, reason", [
    (b'{"hello": "world"}', "malformed-bundle"), (b"[1]", "malformed-bundle"), (b"\x00\xff", "malformed-bundle"),
    (b"", "malformed-bundle"),
    # a Sigstore bundle, but the policy trusts keys only: refused before it is even parsed
    (b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}', "unknown-signer"),
])
def test_a_json_bundle_that_is_not_a_bundle_is_a_refusal(capsys, workspace, content, reason):
    (workspace / "bundle.json").write_bytes(content)
    code, out, _ = run(capsys, "verify", "lead-qualification.v1.yaml", "--trust", "policy.yaml", "--bundle",
                       "bundle.json")
    assert code == 1 and f"[{reason}]" in out


@pytest.mark.parametrize("argv", [
    ["verify", "lead-qualification.v1.yaml", "--trust", "."],              # a directory instead of a file
    ["verify", "lead-qualification.v1.yaml", "--trust", "policy.yaml", "--bundle", "."],
    ["verify", "lead-qualification.v1.yaml"],                                # no policy
    ["verify", "missing.yaml", "--trust", "policy.yaml"],
    ["verify", "--trust", "policy.yaml"],
    ["verify", ".", "lead-qualification.v1.yaml", "--trust", "policy.yaml", "--bundle", "policy.yaml"],
    ["sign", "lead-qualification.v1.yaml", "--key-id", "x"],
    ["sign", "lead-qualification.v1.yaml", "--key", "."],
    ["sign"],
    ["keygen"],
])
def test_usage_errors_exit_2(capsys, workspace, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and err.strip()


def test_in_a_real_process_garbage_never_prints_a_traceback(workspace):
    (workspace / "garbage.json").write_bytes(b"\x89PNG\r\n\x1a\n")
    (workspace / "garbage.yaml").write_bytes(b"\x00\x01keys: [[[")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv, expected in (
            (["verify", "lead-qualification.v1.yaml", "--trust", "garbage.yaml"], 1),
            (["verify", "lead-qualification.v1.yaml", "--trust", "policy.yaml", "--bundle", "garbage.json"], 1),
            (["verify", "garbage.json", "--trust", "policy.yaml"], 1),
            (["verify", workspace, "--trust", "policy.yaml"], 1),
            (["diff", "garbage.yaml", "lead-qualification.v1.yaml"], 1)):
        proc = subprocess.run([sys.executable, "-m", "sealflow", *map(str, argv)], capture_output=True, text=True,
                              cwd=workspace, env=env)
        assert proc.returncode == expected, (argv, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stdout + proc.stderr


# ---------------------------------------------------------------- Sigstore is imported only when needed

PROBE = """\
import json, sys
import sealflow.cli, sealflow.dsl.api
from sealflow.cli import main
codes = [main(argv) for argv in json.loads(sys.argv[1])]
print(json.dumps({"codes": codes, "sigstore": sorted(m for m in sys.modules if m.split('.')[0] == 'sigstore')}))
"""


def _probe(cwd: Path, *argvs: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps([[str(a) for a in argv] for argv in argvs])],
                          capture_output=True, text=True, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_validate_lint_diff_keygen_sign_key_and_dsse_verify_never_import_sigstore(workspace):
    result = _probe(workspace,
                    ["validate", EXAMPLE], ["lint", EXAMPLE], ["plan", EXAMPLE],
                    ["diff", EXAMPLE, "lead-qualification.v1.yaml"],
                    ["keygen", "--out", "probe"], ["sign", "lead-qualification.v1.yaml", "--key", "ops.pem"],
                    ["verify", "lead-qualification.v1.yaml", "--trust", "policy.yaml"])
    assert result["codes"] == [0, 0, 0, 0, 0, 0, 0]
    assert result["sigstore"] == []


def test_verifying_a_sigstore_bundle_does_import_sigstore(workspace):
    # the control for the test above: the probe does see sigstore when it is used
    if not (FIXTURES / "README.md").is_file():
        pytest.skip(f"the Sigstore fixtures folder {FIXTURES} is absent")
    pytest.importorskip("sigstore", reason="sigstore is not installed")
    (workspace / "sig-policy.yaml").write_text(
        f"sigstore:\n  trusted_root: {FIXTURES / 'staging_trusted_root.json'}\n"
        "  identities: [{issuer: https://github.com/login/oauth, identity: jku@goto.fi}]\n")
    result = _probe(workspace, ["verify", FIXTURES / "staging-rekor-v2.txt", "--trust", "sig-policy.yaml",
                                "--bundle", FIXTURES / "staging-rekor-v2.txt.sigstore.json"])
    assert result["codes"] == [1] and "sigstore.verify" in result["sigstore"]


def test_verify_with_the_staging_bundle_checks_the_signature_then_the_definition(capsys, workspace):
    if not (FIXTURES / "README.md").is_file():
        pytest.skip(f"the Sigstore fixtures folder {FIXTURES} is absent")
    pytest.importorskip("sigstore", reason="sigstore is not installed")
    artifact, bundle = FIXTURES / "staging-rekor-v2.txt", FIXTURES / "staging-rekor-v2.txt.sigstore.json"
    for identity, reason in (("jku@goto.fi", "invalid-definition"), ("other@goto.fi", "wrong-identity")):
        (workspace / "sig-policy.yaml").write_text(
            f"sigstore:\n  trusted_root: {FIXTURES / 'staging_trusted_root.json'}\n"
            f"  identities: [{{issuer: https://github.com/login/oauth, identity: {identity}}}]\n")
        code, out, _ = run(capsys, "verify", artifact, "--trust", "sig-policy.yaml", "--bundle", bundle)
        assert code == 1 and f"[{reason}]" in out


# ---------------------------------------------------------------- the CI templates

def _load(name: str) -> dict:
    data = yaml.safe_load((CI / name).read_text(encoding="utf-8"))
    # PyYAML (YAML 1.1) reads the key `on` as True
    data["on"] = data.pop(True, data.get("on"))
    return data


def _runs(workflow: dict) -> str:
    return "\n".join(step.get("run", "") for job in workflow["jobs"].values() for step in job.get("steps", []))


def test_the_pull_request_template_validates_lints_and_diffs_against_the_base(capsys):
    wf = _load("pull-request.yml")
    assert "pull_request" in wf["on"]
    steps = [s for job in wf["jobs"].values() for s in job.get("steps", [])]
    checkout = [s for s in steps if str(s.get("uses", "")).startswith("actions/checkout@")]
    assert checkout and all(s["with"]["fetch-depth"] == 0 for s in checkout)
    script = _runs(wf)
    assert "sealflow validate definitions/" in script
    assert "sealflow lint definitions/ --format github" in script
    assert 'sealflow diff --base "origin/$BASE_REF" definitions/ --format github' in script
    assert "GITHUB_STEP_SUMMARY" in script and "--format markdown" in script
    assert wf["permissions"] == {"contents": "read"}


def test_the_sign_template_signs_keyless_on_the_protected_branch_only():
    wf = _load("sign.yml")
    assert wf["on"]["push"]["branches"] == ["main"]
    [job] = [j for j in wf["jobs"].values() if "id-token" in j.get("permissions", {})]
    assert job["permissions"] == {"id-token": "write", "contents": "write"}
    script = _runs(wf)
    assert "sealflow sign" in script and "--key" not in script
    assert "sealflow verify" in script and ".sigstore.json" in script


@pytest.mark.parametrize("name", ["pull-request.yml", "sign.yml"])
def test_the_templates_install_only_a_pinned_source_the_user_fills_in(name):
    # Given a template as shipped
    wf = _load(name)
    # Then it names no package to fetch from a registry by name, and its install step refuses to run empty
    assert wf["env"]["SEALFLOW_PACKAGE"] == ""
    install = next(s["run"] for job in wf["jobs"].values() for s in job.get("steps", [])
                   if str(s.get("name", "")).startswith("Install sealflow"))
    assert 'if [ -z "$SEALFLOW_PACKAGE" ]' in install and "exit 1" in install
    assert "git URL at a commit" in (CI / name).read_text(encoding="utf-8")


def test_the_templates_are_documented():
    doc = (ROOT / "docs" / "trust.md").read_text(encoding="utf-8")
    assert "tools/ci/pull-request.yml" in doc and "tools/ci/sign.yml" in doc
    assert "What the signature does not prove" in doc


def test_given_a_git_work_tree_when_keygen_writes_there_then_refused_unless_forced(capsys, tmp_path):
    # Given a folder inside a git work tree
    (tmp_path / ".git").mkdir()
    (tmp_path / "keys").mkdir()
    prefix = tmp_path / "keys" / "ops"
    # When keygen is asked to write there
    code, out, err = run(capsys, "keygen", "--out", prefix)
    # Then it refuses (exit 1), writes nothing, and says where to keep the key
    assert code == 1 and "inside the git work tree" in err and "CI secret" in err
    assert not (tmp_path / "keys" / "ops.pem").exists() and not (tmp_path / "keys" / "ops.pub.pem").exists()
    # And with --force it writes the pair
    code, out, _ = run(capsys, "keygen", "--out", prefix, "--force")
    assert code == 0 and (tmp_path / "keys" / "ops.pem").exists() and "keep the private key out" in out
