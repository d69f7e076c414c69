"""The run commands authorise the principal (--as), never the tenant it names (--tenant): issue 9, defect 2.

A principal who is not a member of the run's tenant -- or a member without the operation's permission --
gets exactly the answer for an unknown run id (exit 2), and the attempt is audited once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sealflow.cli import main
from sealflow.store import open_store

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "definitions" / "lead-qualification.v1.yaml")
HIGH = json.dumps({"lead_id": "lead_acme"})  # classified high: waits for a sales manager after the note

POLICY = {
    "tenants": {
        "acme": {"roles": {"sales": ["crm:read", "crm:write", "email:send"],
                           "sales-manager": ["crm:read", "runs:read", "audit:read"],
                           "ops": ["runs:*", "dlq:*", "audit:read"]},
                 "members": {"user:alice": ["sales"], "user:bob": ["sales-manager"], "user:olga": ["ops"]}},
        "globex": {"roles": {"sales": ["crm:read", "crm:write", "email:send"], "ops": ["runs:*", "dlq:*",
                                                                                      "audit:read"]},
                   "members": {"user:gus": ["sales", "ops"]}},
    },
}


@pytest.fixture
def policy(tmp_path) -> str:
    path = tmp_path / "access.yaml"
    path.write_text(yaml.safe_dump(POLICY, sort_keys=False))
    return str(path)


def with_operator(policy: str) -> str:
    """The policy, naming user:root its operator."""
    Path(policy).write_text(yaml.safe_dump({"operators": ["user:root"], **POLICY}, sort_keys=False))
    return policy


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def as_(who, tenant, policy):
    return ("--as", who, "--tenant", tenant, "--access", policy)


def waiting_run(capsys, policy, who="user:alice", tenant="acme") -> str:
    code, out, err = cli(capsys, "run", EXAMPLE, "--input", HIGH, "--json", *as_(who, tenant, policy))
    assert code == 3, (out, err)
    return json.loads(out)["run_id"]


def dead_run(capsys, policy) -> str:
    run_id = waiting_run(capsys, policy)
    code, out, err = cli(capsys, "reject", run_id, "--reason", "no", "--json", *as_("user:bob", "acme", policy))
    assert code == 1 and json.loads(out)["state"] == "failed", (out, err)
    return run_id


def audit_events(tmp_path, name: str) -> list:
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        return [e for e in store.audit(None) if e.event == name]
    finally:
        store.close()


COMMANDS = {
    "status": lambda r: ("status", r),
    "audit": lambda r: ("audit", r),
    "cancel": lambda r: ("cancel", r),
    "approve": lambda r: ("approve", r),
    "reject": lambda r: ("reject", r, "--reason", "no"),
    "dlq show": lambda r: ("dlq", "show", r),
    "dlq redrive": lambda r: ("dlq", "redrive", r),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_outsider_naming_the_tenant_gets_the_unknown_run_answer(capsys, policy, tmp_path, command):
    # Given a run of acme (a dead letter for the dlq commands)
    run_id = dead_run(capsys, policy) if command.startswith("dlq") else waiting_run(capsys, policy)
    _, _, unknown = cli(capsys, "status", "run_nosuchrun", *as_("user:zed", "acme", policy))
    # When zed, a member of no tenant, names acme
    code, out, err = cli(capsys, *COMMANDS[command](run_id), *as_("user:zed", "acme", policy))
    # Then it is exit 2 with the very words for a run that does not exist, and it is audited once
    assert code == 2 and out == "" and err == unknown.replace("run_nosuchrun", run_id)
    denied = [e for e in audit_events(tmp_path, "tenant_denied") if e.run_id == run_id]
    assert [(e.actor, e.detail["reason"]) for e in denied] == [("user:zed", "not_a_member")]


@pytest.mark.parametrize("command", ["status", "audit", "cancel", "dlq show", "dlq redrive"])
def test_a_member_of_another_tenant_with_every_permission_there_gets_the_unknown_run_answer(capsys, policy,
                                                                                          command):
    run_id = dead_run(capsys, policy) if command.startswith("dlq") else waiting_run(capsys, policy)
    _, _, unknown = cli(capsys, "status", "run_nosuchrun", *as_("user:gus", "acme", policy))
    for tenant in ("acme", "globex"):
        code, _, err = cli(capsys, *COMMANDS[command](run_id), *as_("user:gus", tenant, policy))
        assert code == 2 and err == unknown.replace("run_nosuchrun", run_id), (command, tenant)


def test_a_member_without_the_permission_gets_the_unknown_run_answer(capsys, policy, tmp_path):
    run_id = dead_run(capsys, policy)
    # bob reads runs but may not redrive them nor read dead letters
    for command in (("dlq", "redrive", run_id), ("dlq", "show", run_id)):
        code, _, err = cli(capsys, *command, *as_("user:bob", "acme", policy))
        assert code == 2 and f"no run '{run_id}'" in err
    assert [e.detail["operation"] for e in audit_events(tmp_path, "operation_denied")] == ["dlq:redrive",
                                                                                          "dlq:read"]
    # olga (ops) may
    code, out, _ = cli(capsys, "dlq", "show", run_id, "--json", *as_("user:olga", "acme", policy))
    assert code == 0 and json.loads(out)["run"]["id"] == run_id


def test_the_dead_letter_list_shows_nothing_to_an_outsider(capsys, policy):
    run_id = dead_run(capsys, policy)
    code, out, _ = cli(capsys, "dlq", "list", "--json", *as_("user:zed", "acme", policy))
    assert code == 0 and json.loads(out) == []
    code, out, _ = cli(capsys, "dlq", "list", "--json", *as_("user:olga", "acme", policy))
    assert [d["run_id"] for d in json.loads(out)] == [run_id]


def test_recover_json_names_no_run_of_another_tenant(capsys, policy):
    acme_run = waiting_run(capsys, policy)
    globex_run = waiting_run(capsys, policy, who="user:gus", tenant="globex")
    code, out, _ = cli(capsys, "recover", "--json", *as_("user:gus", "globex", policy))
    assert code == 0 and acme_run not in out and globex_run in out
    code, out, _ = cli(capsys, "recover", "--json", *as_("user:zed", "acme", policy))
    assert code == 0 and acme_run not in out and globex_run not in out


def test_audit_verify_walks_only_the_chains_the_caller_may_read(capsys, policy):
    waiting_run(capsys, policy)
    waiting_run(capsys, policy, who="user:gus", tenant="globex")
    code, out, _ = cli(capsys, "audit", "verify", "--json", "--as", "user:gus", "--access", policy)
    assert code == 0 and set(json.loads(out)["events"]) == {"globex"}
    code, out, _ = cli(capsys, "audit", "verify", "--json", "--as", "user:zed", "--access", policy)
    assert code == 0 and json.loads(out)["events"] == {}
    code, _, err = cli(capsys, "audit", "verify", "--tenant", "acme", "--as", "user:gus", "--access", policy)
    assert code == 1 and "user:gus may not read the audit chain of tenant 'acme'" in err
    # an operator sees every chain
    code, out, _ = cli(capsys, "audit", "verify", "--json", "--as", "user:root", "--access", with_operator(policy))
    assert code == 0 and {"acme", "globex"} <= set(json.loads(out)["events"])


def test_audit_head_anchors_only_the_chains_the_caller_may_read(capsys, policy):
    # Given runs in two tenants
    waiting_run(capsys, policy)
    waiting_run(capsys, policy, who="user:gus", tenant="globex")
    # When a member of globex, an outsider and an operator each take an anchor
    code, out, _ = cli(capsys, "audit", "head", "--json", "--as", "user:gus", "--access", policy)
    assert code == 0 and set(json.loads(out)["tenants"]) == {"globex"}
    code, out, _ = cli(capsys, "audit", "head", "--json", "--as", "user:zed", "--access", policy)
    assert code == 0 and json.loads(out)["tenants"] == {}
    code, _, err = cli(capsys, "audit", "head", "--tenant", "acme", "--as", "user:gus", "--access", policy)
    assert code == 1 and "may not read the audit chain of tenant 'acme'" in err
    code, out, _ = cli(capsys, "audit", "head", "--json", "--as", "user:root", "--access", with_operator(policy))
    assert code == 0 and {"acme", "globex"} <= set(json.loads(out)["tenants"])


def test_an_operator_reads_any_tenants_run(capsys, policy):
    run_id = waiting_run(capsys, policy)
    code, _, _ = cli(capsys, "status", run_id, "--json", *as_("user:root", "acme", policy))
    assert code == 2  # not yet an operator
    code, out, _ = cli(capsys, "status", run_id, "--json", *as_("user:root", "acme", with_operator(policy)))
    assert code == 3 and json.loads(out)["run_id"] == run_id


def test_cancel_exits_0_when_accepted_and_1_with_a_sentence_when_the_run_has_ended(capsys, policy, tmp_path):
    run_id = waiting_run(capsys, policy)
    code, out, err = cli(capsys, "cancel", run_id, "--json", *as_("user:alice", "acme", policy))  # her own run
    assert code == 0 and json.loads(out)["state"] == "cancelled", err
    code, out, err = cli(capsys, "cancel", run_id, *as_("user:alice", "acme", policy))
    assert code == 1 and err.strip() == f"sealflow: refused: run {run_id} is already cancelled"
    # a completed run
    done = waiting_run(capsys, policy)
    assert cli(capsys, "approve", done, *as_("user:bob", "acme", policy))[0] == 0
    code, _, err = cli(capsys, "cancel", done, *as_("user:olga", "acme", policy))
    assert code == 1 and "internal error" not in err
    assert err.strip() == (f"sealflow: refused: run {done} has already ended (completed); only a run in progress "
                           "can be cancelled")
    assert [e.run_id for e in audit_events(tmp_path, "cancel_refused")] == [run_id, done]


@pytest.mark.parametrize("option", [("--tenant", "acme\n"), ("--tenant", "ac\x1bme"), ("--as", "user:alice\n"),
                                    ("--as", "user:al\x00ice")])
def test_names_with_control_characters_are_refused(capsys, policy, option):
    for command in (("status", "run_x"), ("approvals", "list"), ("audit", "verify")):
        code, _, err = cli(capsys, *command, "--access", policy, *option)
        assert code == 2 and "Invalid value" in err, (command, option)


def test_status_json_of_a_completed_run_shows_the_input_and_what_the_gate_showed(capsys, policy):
    run_id = waiting_run(capsys, policy)
    code, out, _ = cli(capsys, "approvals", "list", "--json", *as_("user:bob", "acme", policy))
    (listed,) = json.loads(out)
    assert listed["input"] == {"lead_id": "lead_acme"} and listed["show"] is not None
    assert cli(capsys, "approve", run_id, *as_("user:bob", "acme", policy))[0] == 0
    code, out, _ = cli(capsys, "status", run_id, "--json", *as_("user:bob", "acme", policy))
    status = json.loads(out)
    assert code == 0 and status["input"] == {"lead_id": "lead_acme"}
    (gated,) = [s for s in status["steps"] if "approval" in s]
    assert gated["approval"]["show"] == listed["show"]
    assert gated["approval"]["approvals"] == [{"actor": "user:bob", "as": "role:sales-manager"}]


def test_approvals_list_shows_nothing_to_an_outsider_naming_the_tenant(capsys, policy):
    waiting_run(capsys, policy)
    code, out, _ = cli(capsys, "approvals", "list", "--json", *as_("user:zed", "acme", policy))
    assert code == 0 and json.loads(out) == []


def test_the_definition_registry_shared_by_every_tenant_is_for_operators_under_a_policy(capsys, policy):
    # Given a store whose registry names what tenants loaded
    waiting_run(capsys, policy)
    # When a member of one tenant lists it, it is refused (exit 1, a sentence); an operator reads it
    for command in (("definitions", "list"), ("definitions", "show", "lead-qualification")):
        code, out, err = cli(capsys, *command, "--as", "user:gus", "--access", policy)
        assert code == 1 and out == "" and "only an operator of the access policy" in err, command
        code, _, _ = cli(capsys, *command, "--json", "--as", "user:root", "--access", with_operator(policy))
        assert code in (0, 2), command  # 2: an unsigned run records no definition (nothing to show)
    # and without a policy (open development mode) it reads as before
    assert cli(capsys, "definitions", "list")[0] == 0


def test_approvals_list_text_shows_the_input_and_the_payload(capsys, policy):
    run_id = waiting_run(capsys, policy)
    code, out, _ = cli(capsys, "approvals", "list", *as_("user:bob", "acme", policy))
    assert code == 0 and run_id in out and 'input: {"lead_id": "lead_acme"}' in out and "    show sha256:" in out
