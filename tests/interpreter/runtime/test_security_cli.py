"""The command line under an access policy: --as, --tenant, --access (and their environment variables)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from security_helpers import PolicyFile

from sealflow.cli import main
from sealflow.store import open_store

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = str(ROOT / "definitions" / "lead-qualification.v1.yaml")
HIGH = json.dumps({"lead_id": "lead_acme"})  # classified high: waits for a sales manager after the note

TENANTS = {
    "acme": {"roles": {"sales": ["crm:read", "crm:write", "email:send"],
                       "sales-manager": ["crm:read", "runs:read", "audit:read"]},
             "members": {"user:alice": ["sales"], "user:bob": ["sales-manager"], "user:carl": ["sales"]}},
    "globex": {"roles": {"sales-manager": ["crm:read"]}, "members": {"user:gus": ["sales-manager"]}},
}


@pytest.fixture
def policy(tmp_path):
    return PolicyFile(tmp_path / "access.yaml", TENANTS)


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def as_(who, tenant, policy):
    return ("--as", who, "--tenant", tenant, "--access", str(policy.path))


def runs_in_store(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        return store.list_runs()
    finally:
        store.close()


def start_waiting_run(capsys, policy):
    code, out, err = cli(capsys, "run", EXAMPLE, "--input", HIGH, "--json", *as_("user:alice", "acme", policy))
    result = json.loads(out)
    assert code == 3 and result["state"] == "waiting", (out, err)
    assert "OPEN DEVELOPMENT MODE" not in err
    assert result["access"] == "policy" and result["tenant"] == "acme"
    return result["run_id"]


def test_an_outsider_submitting_from_the_command_line_is_refused_and_nothing_is_created(capsys, policy, tmp_path):
    code, out, err = cli(capsys, "submit", EXAMPLE, "--input", HIGH, *as_("user:mallory", "acme", policy))
    assert code == 1 and out == ""
    assert "refused: unauthorized: user:mallory is not a member of tenant 'acme'" in err
    assert runs_in_store(tmp_path) == []


def test_a_policy_run_end_to_end_with_approvals_list_sod_and_tenants(capsys, policy):
    # Given alice's run of the example, waiting for a sales manager
    run_id = start_waiting_run(capsys, policy)
    # When bob lists what waits for him, it is there; alice (who started it) sees nothing
    code, out, _ = cli(capsys, "approvals", "list", "--json", *as_("user:bob", "acme", policy))
    (waiting,) = json.loads(out)
    assert code == 0 and waiting["run_id"] == run_id and waiting["as"] == "role:sales-manager"
    code, out, _ = cli(capsys, "approvals", "list", *as_("user:alice", "acme", policy))
    assert code == 0 and "nothing waits for user:alice in tenant acme" in out
    # alice approving her own run is refused (exit 1, a clear message)
    code, _, err = cli(capsys, "approve", run_id, *as_("user:alice", "acme", policy))
    assert code == 1 and "separation of duties" in err
    # so is carl, who sells but does not manage (not an approver)
    code, _, err = cli(capsys, "reject", run_id, "--reason", "no", *as_("user:carl", "acme", policy))
    assert code == 1 and "user:carl (roles in tenant 'acme': role:sales) is not an approver" in err
    # gus, a sales manager of globex, cannot see, approve or audit it: it does not exist for him
    code, _, unknown = cli(capsys, "status", "run_nosuchrun", *as_("user:gus", "globex", policy))
    for command in (("status", run_id), ("approve", run_id), ("audit", run_id),
                    ("reject", run_id, "--reason", "no"), ("cancel", run_id)):
        code, _, err = cli(capsys, *command, *as_("user:gus", "globex", policy))
        assert code == 2 and err == unknown.replace("run_nosuchrun", run_id), command
    # bob approves: the run completes
    code, out, _ = cli(capsys, "approve", run_id, "--json", "--comment", "ok", *as_("user:bob", "acme", policy))
    assert code == 0 and json.loads(out)["state"] == "completed"
    # and the audit, read within acme, holds every decision and every refusal
    code, out, _ = cli(capsys, "audit", run_id, "--json", *as_("user:bob", "acme", policy))
    trail = json.loads(out)
    names = [e["event"] for e in trail]
    assert "approval_granted" in names and "approval_refused" in names
    assert sum(e["event"] == "tenant_denied" for e in trail) == 5
    granted = next(e for e in trail if e["event"] == "approval_granted")
    assert granted["actor"] == "user:bob" and granted["detail"]["comment"] == "ok"


def test_a_revocation_between_commands_denies_the_step_after_the_gate(capsys, policy):
    run_id = start_waiting_run(capsys, policy)
    policy.revoke("user:alice", "sales")
    code, out, _ = cli(capsys, "approve", run_id, "--json", *as_("user:bob", "acme", policy))
    result = json.loads(out)
    assert code == 1 and result["state"] == "failed" and result["error"]["class"] == "unauthorized"
    assert {s["id"]: s["state"] for s in result["steps"]}["follow_up"] == "failed"


def test_identity_comes_from_the_environment_too(capsys, policy, monkeypatch):
    run_id = start_waiting_run(capsys, policy)
    monkeypatch.setenv("SEALFLOW_ACCESS", str(policy.path))
    monkeypatch.setenv("SEALFLOW_TENANT", "acme")
    monkeypatch.setenv("SEALFLOW_USER", "bob")
    code, out, err = cli(capsys, "approvals", "list", "--json")
    assert code == 0 and [w["run_id"] for w in json.loads(out)] == [run_id]
    assert "OPEN DEVELOPMENT MODE" not in err
    monkeypatch.setenv("SEALFLOW_TENANT", "globex")
    code, out, _ = cli(capsys, "approvals", "list", "--json")
    assert json.loads(out) == []


def test_open_development_mode_says_so_and_is_recorded(capsys):
    code, out, err = cli(capsys, "run", EXAMPLE, "--input", json.dumps({"lead_id": "lead_midco"}), "--json")
    assert code == 0 and "warning: OPEN DEVELOPMENT MODE" in err
    assert json.loads(out)["access"] == "open-development"


def test_submit_to_a_shared_store_refuses_to_start_without_a_policy(capsys, policy):
    code, _, err = cli(capsys, "submit", EXAMPLE, "--input", HIGH, "--store", "redis://localhost:6379/0")
    assert code == 1 and "submit to a shared store refuses to start without an access policy" in err
    # with a policy it goes on, to the store (which this build does not have)
    code, _, err = cli(capsys, "submit", EXAMPLE, "--input", HIGH, "--store", "redis://localhost:6379/0",
                       *as_("user:alice", "acme", policy))
    assert code == 2 and "Redis store is not available" in err


def test_bad_principals_tenants_and_policies_are_usage_errors(capsys, tmp_path):
    code, _, err = cli(capsys, "status", "run_x", "--as", "alice")
    assert code == 2 and "user:NAME or service:NAME" in err
    code, _, err = cli(capsys, "status", "run_x", "--tenant", "no such tenant")
    assert code == 2 and "not a tenant name" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("tenants:\n  acme:\n    members: {user:bob: [ghost]}\n")
    code, _, err = cli(capsys, "status", "run_x", "--access", str(bad))
    assert code == 2 and f"{bad}:3:26: error[P801]" in err and "ghost" in err
