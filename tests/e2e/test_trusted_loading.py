"""Runtime loading with a trust policy: only what a trusted signer signed runs, and a store never
silently replaces or rolls back a signed version.

Given an Ed25519 key in a trust policy and signed definitions, when `sealflow run --trust` loads them,
then a verified file runs and records its signer; a tampered file, an unknown signer, a file whose name
disagrees with the name and version inside, a second digest for a recorded version and a rollback are
refused with exit 1 and nothing runs; an operator's pin allows the rollback and is audited.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sealflow.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "definitions" / "lead-qualification.v1.yaml"
INPUT = json.dumps({"lead_id": "lead_midco"})


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def signed(tmp_path, capsys):
    """A folder with a key pair, a trust policy naming it, and the example signed as v1 and v2."""
    folder = tmp_path / "repo"
    folder.mkdir()
    assert cli(capsys, "keygen", "--out", folder / "ops")[0] == 0
    (folder / "policy.yaml").write_text("keys:\n  - id: ops\n    public_key: ops.pub.pem\n")
    v1 = folder / "lead-qualification.v1.yaml"
    shutil.copy(EXAMPLE, v1)
    v2 = folder / "lead-qualification.v2.yaml"
    v2.write_text(EXAMPLE.read_text().replace("version: 1", "version: 2", 1))
    for f in (v1, v2):
        assert cli(capsys, "sign", f, "--key", folder / "ops.pem")[0] == 0
    return folder


def run(capsys, folder, name, *extra):
    return cli(capsys, "run", folder / name, "--trust", folder / "policy.yaml", "--input", INPUT, "--json", *extra)


def fingerprint(public_pem: Path) -> str:
    from sealflow.dsl.trust import signing

    return signing.key_id(signing.load_public_key(public_pem.read_bytes()))


def runs_in_store(capsys) -> int:
    from sealflow.store import open_store

    store = open_store()
    try:
        return len(store.list_runs())
    finally:
        store.close()


def test_given_a_signed_definition_when_run_with_trust_then_it_runs_and_records_its_signer(capsys, signed):
    code, out, _ = run(capsys, signed, "lead-qualification.v1.yaml")
    result = json.loads(out)
    signer = f"key:{fingerprint(signed / 'ops.pub.pem')}"  # the key itself, not the policy's label "ops"
    assert code == 0 and result["state"] == "completed" and result["signer"] == signer
    code, out, _ = cli(capsys, "definitions", "list", "--json")
    [record] = json.loads(out)
    assert (record["name"], record["version"], record["signer"], record["active"]) == \
        ("lead-qualification", 1, signer, True)


def test_given_a_tampered_file_when_run_with_trust_then_refused_and_nothing_runs(capsys, signed):
    path = signed / "lead-qualification.v1.yaml"
    path.write_text(path.read_text().replace("max_attempts: 3", "max_attempts: 20"))
    code, _, err = run(capsys, signed, "lead-qualification.v1.yaml")
    assert code == 1 and "[tampered]" in err
    assert runs_in_store(capsys) == 0


def test_given_an_unknown_signer_when_run_with_trust_then_refused(capsys, signed, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    assert cli(capsys, "keygen", "--out", other / "mallory")[0] == 0
    assert cli(capsys, "sign", signed / "lead-qualification.v1.yaml", "--key", other / "mallory.pem")[0] == 0
    code, _, err = run(capsys, signed, "lead-qualification.v1.yaml")
    assert code == 1 and "[unknown-signer]" in err
    assert runs_in_store(capsys) == 0


def test_given_an_unsigned_file_when_run_with_trust_then_refused(capsys, signed):
    (signed / "lead-qualification.v1.yaml.dsse.json").unlink()
    code, _, err = run(capsys, signed, "lead-qualification.v1.yaml")
    assert code == 1 and "[unsigned]" in err


def test_given_a_file_named_for_another_version_when_run_with_trust_then_refused(capsys, signed):
    renamed = signed / "lead-qualification.v7.yaml"
    shutil.copy(signed / "lead-qualification.v1.yaml", renamed)
    shutil.copy(signed / "lead-qualification.v1.yaml.dsse.json", str(renamed) + ".dsse.json")
    code, _, err = run(capsys, signed, "lead-qualification.v7.yaml")
    assert code == 1 and "holds lead-qualification" in err and "v7" in err
    assert runs_in_store(capsys) == 0


def test_given_a_signed_file_whose_name_says_no_version_when_run_with_trust_then_refused(capsys, signed):
    renamed = signed / "latest.yaml"
    shutil.copy(signed / "lead-qualification.v1.yaml", renamed)
    shutil.copy(signed / "lead-qualification.v1.yaml.dsse.json", str(renamed) + ".dsse.json")
    code, _, err = run(capsys, signed, "latest.yaml")
    assert code == 1 and "not what its file name says" in err and "lead-qualification.v1.yaml" in err
    assert runs_in_store(capsys) == 0


def test_given_a_recorded_version_when_a_second_digest_arrives_then_refused(capsys, signed):
    assert run(capsys, signed, "lead-qualification.v1.yaml")[0] == 0
    path = signed / "lead-qualification.v1.yaml"
    path.write_text(path.read_text().replace("timeout: 24h", "timeout: 48h"))
    assert cli(capsys, "sign", path, "--key", signed / "ops.pem")[0] == 0  # validly signed, but v1 already ran
    code, _, err = run(capsys, signed, "lead-qualification.v1.yaml")
    assert code == 1 and "[second-digest]" in err
    assert runs_in_store(capsys) == 1


def test_given_a_newer_version_ran_when_an_older_one_is_loaded_then_refused_unless_pinned(capsys, signed):
    assert run(capsys, signed, "lead-qualification.v1.yaml")[0] == 0
    assert run(capsys, signed, "lead-qualification.v2.yaml")[0] == 0
    code, _, err = run(capsys, signed, "lead-qualification.v1.yaml")
    assert code == 1 and "[rollback]" in err and "--pin-version" in err
    code, out, _ = run(capsys, signed, "lead-qualification.v1.yaml", "--pin-version", "--as", "user:operator")
    assert code == 0 and json.loads(out)["version"] == 1
    code, out, _ = cli(capsys, "definitions", "show", "lead-qualification", "--json")
    records = {r["version"]: r for r in json.loads(out)}
    assert records[1]["active"] and records[1]["pinned"] and not records[2]["active"]
    from sealflow.store import open_store

    store = open_store()
    try:
        pins = [e for e in store.audit(None) if e.event == "definition.pinned"]
    finally:
        store.close()
    assert pins and pins[0].actor == "user:operator"


def test_given_no_trust_policy_when_run_then_development_mode_is_announced_and_recorded(capsys):
    code, out, err = cli(capsys, "run", EXAMPLE, "--input", INPUT, "--json")
    assert code == 0 and "development mode" in err
    assert json.loads(out)["signer"] == "unsigned"


def test_given_a_run_in_flight_when_a_newer_version_is_loaded_then_it_keeps_its_version(capsys, signed):
    code, out, _ = cli(capsys, "run", signed / "lead-qualification.v1.yaml", "--trust", signed / "policy.yaml",
                       "--input", json.dumps({"lead_id": "lead_acme"}), "--json")
    waiting = json.loads(out)
    assert code == 3 and waiting["state"] == "waiting"
    assert run(capsys, signed, "lead-qualification.v2.yaml")[0] == 0
    code, out, _ = cli(capsys, "approve", waiting["run_id"], "--as", "user:ben", "--json")
    done = json.loads(out)
    assert code == 0 and done["state"] == "completed"
    assert (done["version"], done["plan_digest"]) == (1, waiting["plan_digest"])


def test_given_an_outsider_when_their_pin_version_is_refused_then_no_pin_is_left_behind(capsys, signed):
    # Given an access policy, and v1 then v2 run by a member (v2 is active)
    (signed / "access.yaml").write_text(
        "tenants:\n  default:\n    roles: {ops: ['crm:read', 'crm:write', 'email:send']}\n"
        "    members: {'user:ana': [ops]}\n")
    access = ("--access", signed / "access.yaml")
    assert run(capsys, signed, "lead-qualification.v1.yaml", "--as", "user:ana", *access)[0] == 0
    assert run(capsys, signed, "lead-qualification.v2.yaml", "--as", "user:ana", *access)[0] == 0
    # When an outsider submits v1 with --pin-version
    code, _, err = cli(capsys, "submit", signed / "lead-qualification.v1.yaml", "--trust", signed / "policy.yaml",
                       "--input", INPUT, "--pin-version", "--as", "user:mallory", *access)
    # Then it is refused, and no pin is left: the next run of v1 is still a refused rollback
    assert code == 1 and "unauthorized" in err
    code, out, _ = cli(capsys, "definitions", "show", "lead-qualification", "--json")
    assert not any(r["pinned"] for r in json.loads(out))
    code, _, err = run(capsys, signed, "lead-qualification.v1.yaml", "--as", "user:ana", *access)
    assert code == 1 and "[rollback]" in err
    assert runs_in_store(capsys) == 2


def test_given_an_operator_trust_policy_when_recover_drives_a_forged_run_then_it_is_refused(capsys, signed, tmp_path,
                                                                                            monkeypatch):
    # Given an attacker's key, named "ops" in the attacker's own policy, and v2 signed with it and submitted
    evil = tmp_path / "evil"
    evil.mkdir()
    assert cli(capsys, "keygen", "--out", evil / "ops")[0] == 0
    (evil / "policy.yaml").write_text("keys:\n  - id: ops\n    public_key: ops.pub.pem\n")
    forged = evil / "lead-qualification.v2.yaml"
    shutil.copy(signed / "lead-qualification.v2.yaml", forged)
    assert cli(capsys, "sign", forged, "--key", evil / "ops.pem")[0] == 0
    code, out, _ = cli(capsys, "submit", forged, "--trust", evil / "policy.yaml", "--input", INPUT)
    assert code == 0
    run_id = out.strip()
    # When an operator whose own policy is the genuine one ($SEALFLOW_TRUST) drives the runs in flight
    monkeypatch.setenv("SEALFLOW_TRUST", str(signed / "policy.yaml"))
    code, out, _ = cli(capsys, "recover", "--json")
    # Then the forged run is refused before its first step, and its version is not active
    assert json.loads(out)["runs"][run_id] == "failed"
    code, out, _ = cli(capsys, "status", run_id, "--json")
    assert "trust policy refuses" in out
    code, out, _ = cli(capsys, "definitions", "show", "lead-qualification", "--json")
    assert [r["active"] for r in json.loads(out)] == [False]


def test_given_a_signed_definition_with_a_schema_file_when_an_executor_verifies_it_then_it_compiles_again(
        capsys, signed):
    # Given a signed definition whose output schema is a $ref to a file beside it (not in the signed bytes)
    (signed / "schemas").mkdir()
    shutil.copy(ROOT / "schemas" / "support-triage-result.json", signed / "schemas")
    triage = signed / "support-triage.v1.yaml"
    shutil.copy(ROOT / "definitions" / "support-triage.v1.yaml", triage)
    assert cli(capsys, "sign", triage, "--key", signed / "ops.pem")[0] == 0
    # When it runs with --trust (this process executes, so it verifies the stored bytes like a worker)
    code, out, err = cli(capsys, "run", triage, "--trust", signed / "policy.yaml", "--input",
                         json.dumps({"ticket_id": "tkt_1005"}), "--json", "--as", "user:ana")
    # Then the stored bytes compile again with the stored schema file, to the same plan: the run completes
    assert code == 0 and json.loads(out)["state"] == "completed", err
