"""The security diff: one test per kind of change, matching, locations, and the CLI (exit codes, --base)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sealflow.cli import main
from sealflow.dsl.api import check_bytes
from sealflow.dsl.codes import CODES
from sealflow.dsl.diff import Side, diff_plans, diff_sides, needs_review
from sealflow.dsl.model import ActionInfo

ROOT = Path(__file__).resolve().parents[2]

BASE = """\
sealflow: 1
name: lead-followup
version: 1
owner: team:sales
trigger:
  schedule: {cron: "0 6 * * 1-5", timezone: UTC, run_as: service:lead-batch}
permissions: [crm:read, crm:write, email:send]
budget: {max_steps: 20, max_runtime: 10m, max_tokens: 5000}
approvals: {approvers: [role:sales-manager], timeout: 24h}
defaults: {timeout: 20s, retry: transient}
retry:
  transient:
    on: [timeout, network]
    max_attempts: 3
    backoff: {initial: 200ms, factor: 2, max: 2s, jitter: full}
  once: {max_attempts: 1}
steps:
  - id: fetch
    action: crm.get_lead
    with: {lead_id: "${{ input.lead_id }}"}
    permissions: [crm:read]
  - id: classify
    ai:
      model: default
      fallback: [small]
      prompt: {template: "Classify: ${{ steps.fetch.output }}"}
      max_tokens: 500
      output_schema: {type: object, required: [tier], properties: {tier: {enum: [high, low]}}}
    validate: ["output.tier != ''"]
    budget: {max_tokens: 1000}
  - id: research
    agent:
      model: default
      goal: "Research ${{ steps.fetch.output }}"
      tools: [crm.get_lead]
      max_steps: 5
      max_tool_calls: 5
    permissions: [crm:read]
  - id: gate
    approval:
      approvers: [role:sales-manager]
      quorum: 2
      timeout: 1h
      show: "steps.classify.output"
  - id: record
    action: crm.add_note
    with: {note: "x"}
    permissions: [crm:write]
    idempotency_key: "${{ run.id }}:record"
    requires_approval_if: "steps.classify.output.tier == 'high'"
  - id: send
    action: email.send
    with: {to: "a@example.com"}
    permissions: [email:send]
    idempotency_key: "${{ run.id }}:send"
    retry: once
    timeout: 10s
  - id: done
    succeed: {}
"""

ACTIONS = {
    "crm.get_lead": ActionInfo(name="crm.get_lead", permissions=("crm:read",), effect="read"),
    "crm.add_note": ActionInfo(name="crm.add_note", permissions=("crm:write",), effect="write"),
    "crm.delete_lead": ActionInfo(name="crm.delete_lead", permissions=("crm:write",), effect="irreversible"),
    "crm.tag_lead": ActionInfo(name="crm.tag_lead", permissions=("crm:write",), effect="write"),
    "email.send": ActionInfo(name="email.send", permissions=("email:send",), effect="irreversible"),
}


def line_of(text: str, fragment: str) -> int:
    """1-based line of the only line of ``text`` holding ``fragment``."""
    [n] = [i for i, line in enumerate(text.splitlines(), 1) if fragment in line]
    return n


def compile_side(text: str, path: str = "new.yaml", actions=None) -> Side:
    result = check_bytes(text.encode(), path, actions=actions)
    assert result.plan is not None and result.ok, [d.format() for d in result.diagnostics]
    return Side(result.plan, path, result.document.locate)


def findings(new_text: str, old_text: str = BASE, actions=None):
    old, new = compile_side(old_text, "old.yaml", actions), compile_side(new_text, "new.yaml", actions)
    return diff_plans(old.plan, new.plan, locate=new.locate, path=new.path)


def change(old: str, new: str, text: str = BASE, count: int = 1) -> str:
    assert text.count(old) == count, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


def codes(found) -> list[str]:
    return sorted({f.code for f in found})


def only(found, code):
    matching = [f for f in found if f.code == code]
    assert matching, f"no {code} in {[f.format() for f in found]}"
    return matching


# ---------------------------------------------------------------- formatting does not matter

def test_given_the_same_definition_reformatted_when_diffed_then_nothing_is_reported():
    # Given the same workflow with comments, block style and defaults written out
    reformatted = change("permissions: [crm:read, crm:write, email:send]\n",
                         "# reordered and commented\npermissions:\n  - crm:read\n  - crm:write\n  - email:send\n")
    reformatted = change("  once: {max_attempts: 1}\n", "  once:\n    max_attempts: 1\n", reformatted)
    # When diffed, Then there is no finding at all
    assert findings(reformatted) == []


# ---------------------------------------------------------------- one test per kind of change

def test_d601_permission_added_at_workflow_and_step_level_needs_review_located_in_the_new_file():
    new = change("permissions: [crm:read, crm:write, email:send]", "permissions: [crm:read, crm:write, email:send, "
                 "crm:delete]")
    new = change("    permissions: [crm:write]\n", "    permissions: [crm:write, crm:read]\n", new)
    found = findings(new)
    workflow, step = only(found, "D601")
    assert workflow.severity == "review" and workflow.step is None and workflow.new == "crm:delete"
    assert (workflow.location.line, workflow.location.column) == (7, 48)
    assert step.step == "record" and step.new == "crm:read" and step.location.path == "new.yaml"
    assert needs_review(found)


def test_d602_permission_removed_is_info():
    new = change("    permissions: [email:send]\n", "", change(", email:send]", "]"))
    new = change("    action: email.send\n", "    action: crm.tag_lead\n", new)
    found = findings(new)
    removed = only(found, "D602")
    assert {f.old for f in removed} == {"email:send"} and all(f.severity == "info" for f in removed)


@pytest.mark.parametrize("old, new, label", [
    ("max_tokens: 5000}", "max_tokens: 50000}", "budget.max_tokens raised: 5000 -> 50000"),
    ("max_runtime: 10m,", "max_runtime: 2h,", "budget.max_runtime raised: 10m -> 2h"),
    ("{max_steps: 20, max_runtime: 10m, max_tokens: 5000}", "{max_steps: 20, max_runtime: 10m}",
     "budget.max_tokens removed: 5000 -> unlimited"),
    ("    budget: {max_tokens: 1000}\n", "    budget: {max_tokens: 9000}\n", "budget.max_tokens raised: 1000 -> 9000"),
    ("      max_tokens: 500\n", "", "ai.max_tokens removed: 500 -> unlimited"),
    ("      max_tool_calls: 5\n", "      max_tool_calls: 50\n", "agent.max_tool_calls raised: 5 -> 50"),
    ("      max_steps: 5\n", "      max_steps: 9\n", "agent.max_steps raised: 5 -> 9"),
])
def test_d603_budget_raised_or_removed_needs_review(old, new, label):
    found = findings(change(old, new))
    [f] = only(found, "D603")
    assert f.severity == "review" and label in f.message


def test_d604_budget_lowered_or_added_is_info():
    found = findings(change("max_tokens: 5000}", "max_tokens: 100, max_cost_usd: 0.5}"))
    assert codes(found) == ["D604", "D625"]
    assert {f.message for f in found if f.code == "D604"} == {
        "budget.max_tokens lowered: 5000 -> 100", "budget.max_cost_usd added: unlimited -> 0.5"}


@pytest.mark.parametrize("old, new, words", [
    ("    max_attempts: 3\n", "    max_attempts: 8\n", "max_attempts raised: 3 -> 8 (class transient)"),
    ("max: 2s, jitter", "max: 1m, jitter", "backoff.max raised: 2s -> 1m"),
    ("on: [timeout, network]", "on: [timeout, network, unavailable]", "now retries unavailable"),
])
def test_d605_retry_attempts_or_backoff_raised_needs_review_at_the_class(old, new, words):
    found = only(findings(change(old, new)), "D605")
    assert all(f.severity == "review" and words in f.message for f in found)
    # every step using the class (the default) is named; the location is the changed field of the class
    assert {f.step for f in found} == {"fetch", "classify", "research", "record"}
    assert {f.location.line for f in found} == {line_of(BASE, old.strip())}


def test_d605_a_step_switching_to_a_stronger_retry_class_is_located_at_the_step():
    found = findings(change("    retry: once\n", "    retry: transient\n"))
    raised = only(found, "D605")
    assert {f.message for f in raised} == {"retry max_attempts raised: 1 -> 3 (class transient)",
                                          "retry now retries timeout, network (class transient)"}
    assert {(f.step, f.location.line) for f in raised} == {("send", line_of(BASE, "retry: once"))}


def test_d606_retry_lowered_is_info():
    found = findings(change("    max_attempts: 3\n", "    max_attempts: 2\n"))
    assert codes(found) == ["D606", "D625"] and not needs_review(found)


@pytest.mark.parametrize("old, new, what", [
    ("  - id: gate\n    approval:\n      approvers: [role:sales-manager]\n      quorum: 2\n      timeout: 1h\n"
     "      show: \"steps.classify.output\"\n", "", "approval step gate removed"),
    ("    requires_approval_if: \"steps.classify.output.tier == 'high'\"\n", "", "requires_approval_if removed"),
    ("  - id: gate\n    approval:\n      approvers: [role:sales-manager]\n      quorum: 2\n      timeout: 1h\n"
     "      show: \"steps.classify.output\"\n", "  - id: gate\n    set: {x: \"1\"}\n", "approval gate removed"),
])
def test_d607_approval_gate_removed_needs_review(old, new, what):
    [f] = only(findings(change(old, new)), "D607")
    assert f.severity == "review" and what in f.message


@pytest.mark.parametrize("old, new, words", [
    ("      approvers: [role:sales-manager]\n      quorum: 2\n",
     "      approvers: [role:sales-manager, role:intern]\n      quorum: 2\n", "more people may approve: role:intern"),
    ("      quorum: 2\n", "      quorum: 1\n", "quorum lowered: 2 -> 1"),
    ("      timeout: 1h\n      show", "      timeout: 1h\n      on_timeout: {next: record}\n      show",
     "on_timeout reject -> next record"),
    ("      quorum: 2\n", "      quorum: 2\n      separation_of_duties: false\n", "separation_of_duties turned off"),
    ("      show: \"steps.classify.output\"\n", "", "show removed"),
    ("tier == 'high'\"", "tier == 'platinum'\"", "requires_approval_if changed"),
    ("approvals: {approvers: [role:sales-manager], timeout: 24h}",
     "approvals: {approvers: [role:sales-manager, role:anyone], timeout: 24h}", "approval gate: more people"),
])
def test_d608_approval_gate_weakened_needs_review(old, new, words):
    found = only(findings(change(old, new)), "D608")
    assert any(words in f.message for f in found) and all(f.severity == "review" for f in found)


def test_d609_approval_gate_strengthened_is_info():
    found = findings(change("      quorum: 2\n", "      quorum: 3\n"))
    assert codes(found) == ["D609", "D625"] and "quorum raised: 2 -> 3" in only(found, "D609")[0].message


def test_d610_new_irreversible_action_with_action_metadata_needs_review():
    new = change("    action: crm.add_note\n", "    action: crm.delete_lead\n")
    found = findings(new, actions=ACTIONS)
    [f] = only(found, "D610")
    assert f.severity == "review" and f.step == "record" and "crm.delete_lead" in f.message
    assert "D611" not in codes(found)


def test_d611_new_action_without_metadata_needs_review_d612_with_metadata_read_write_is_info():
    new = change("    action: crm.add_note\n", "    action: crm.tag_lead\n")
    [f] = only(findings(new), "D611")
    assert f.severity == "review" and "effect unknown" in f.message
    found = findings(new, actions=ACTIONS)
    [g] = only(found, "D612")
    assert g.severity == "info" and "effect write" in g.message and "D611" not in codes(found)


def test_d613_new_model_in_ai_model_fallback_or_agent_needs_review():
    new = change("      fallback: [small]\n", "      fallback: [small, big-external]\n")
    new = change("    agent:\n      model: default\n", "    agent:\n      model: frontier\n", new)
    found = only(findings(new), "D613")
    assert {f.new for f in found} == {"big-external", "frontier"} and all(f.severity == "review" for f in found)
    assert {f.step for f in found} == {"classify", "research"}


def test_d614_new_agent_tool_needs_review():
    new = change("      tools: [crm.get_lead]\n", "      tools: [crm.get_lead, email.send]\n")
    new = change("    permissions: [crm:read]\n  - id: gate",
                 "    permissions: [crm:read, email:send]\n  - id: gate", new)
    [f] = only(findings(new), "D614")
    assert f.severity == "review" and f.new == "email.send" and f.step == "research"


@pytest.mark.parametrize("old, new, words", [
    ("    timeout: 10s\n", "    timeout: 5m\n", "timeout lengthened: 10s -> 5m"),
])
def test_d615_timeout_lengthened_is_info(old, new, words):
    # an approval timeout lengthened is D608 (review): see test_diff_risks.py
    [f] = only(findings(change(old, new)), "D615")
    assert f.severity == "info" and words in f.message


def test_d616_idempotency_key_dropped_needs_review_and_d617_changed_is_info():
    dropped = change("    idempotency_key: \"${{ run.id }}:send\"\n", "")
    [f] = only(findings(dropped), "D616")
    assert f.severity == "review" and f.step == "send"
    changed = change("\"${{ run.id }}:send\"", "\"${{ run.id }}:${{ run.attempt }}\"")
    [g] = only(findings(changed), "D617")
    assert g.severity == "info"


def test_d618_trigger_added_needs_review_and_d619_removed_or_rescheduled_is_info():
    added = change("  schedule:", "  event: {type: crm.lead.created, source: crm}\n  schedule:")
    [f] = only(findings(added), "D618")
    assert f.severity == "review" and "event trigger added: crm.lead.created from crm" in f.message
    removed = change("trigger:\n  schedule: {cron: \"0 6 * * 1-5\", timezone: UTC, run_as: service:lead-batch}\n", "")
    assert codes(findings(removed)) == ["D619", "D625"]
    rescheduled = change("0 6 * * 1-5", "0 7 * * 1-5")
    [g] = only(findings(rescheduled), "D619")
    assert g.severity == "info" and "cron changed" in g.message


def test_d620_run_as_identity_changed_needs_review():
    [f] = only(findings(change("run_as: service:lead-batch", "run_as: service:admin")), "D620")
    assert f.severity == "review" and f.old == "service:lead-batch" and f.new == "service:admin"
    assert (f.location.line, f.location.column) == (6, 58)


def test_d621_reauthorize_turned_off_needs_review():
    new = change("    idempotency_key: \"${{ run.id }}:record\"\n",
                 "    idempotency_key: \"${{ run.id }}:record\"\n    reauthorize: false\n")
    found = findings(new, old_text=change("    idempotency_key: \"${{ run.id }}:record\"\n",
                                          "    idempotency_key: \"${{ run.id }}:record\"\n    reauthorize: true\n"))
    [f] = only(found, "D621")
    assert f.severity == "review" and f.step == "record"


def test_d622_output_checks_removed_need_review():
    new = change("    validate: [\"output.tier != ''\"]\n", "")
    new = change("      output_schema: {type: object, required: [tier], properties: {tier: {enum: [high, low]}}}\n",
                 "", new)
    found = only(findings(new), "D622")
    assert len(found) == 2 and all(f.step == "classify" and f.severity == "review" for f in found)


def test_d625_content_changed_without_a_version_bump_and_not_with_one():
    new = change("    timeout: 10s\n", "    timeout: 5s\n")
    assert codes(findings(new)) == ["D625"]
    assert codes(findings(change("version: 1", "version: 2", new))) == []


def test_d626_steps_added_and_removed_are_info_context():
    new = change("  - id: done\n", "  - id: note\n    set: {x: \"1\"}\n  - id: done\n")
    [f] = only(findings(new), "D626")
    assert f.severity == "info" and f.step == "note" and "step added" in f.message


def test_every_diff_code_is_registered_with_review_or_info():
    diff_codes = {c: s for c, (s, _) in CODES.items() if c.startswith("D6")}
    assert set(diff_codes.values()) == {"review", "info"}
    assert sorted(diff_codes) == [f"D6{n:02d}" for n in range(1, 37)]


# ---------------------------------------------------------------- matching workflows

def test_given_a_new_version_when_diffed_against_folders_then_it_is_compared_with_the_previous_version():
    v1 = compile_side(BASE, "definitions/lead-followup.v1.yaml")
    v2_text = change("version: 1", "version: 2", change("quorum: 2", "quorum: 1"))
    v2 = compile_side(v2_text, "definitions/lead-followup.v2.yaml")
    found = diff_sides([v1], [v1, v2])
    assert codes(found) == ["D608"] and found[0].location.path.endswith("v2.yaml")


def test_given_a_new_and_a_removed_workflow_then_d623_needs_review_and_d624_is_info():
    other = compile_side(change("name: lead-followup", "name: other-flow"), "other.yaml")
    base = compile_side(BASE, "base.yaml")
    found = diff_sides([base], [other])
    assert [(f.code, f.severity, f.workflow) for f in found] == [
        ("D624", "info", "lead-followup"), ("D623", "review", "other-flow")]
    new = [f for f in found if f.code == "D623"][0]
    assert "permissions [crm:read, crm:write, email:send]" in new.message and new.location.line == 2


# ---------------------------------------------------------------- the command line

def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_cli_exit_0_when_nothing_needs_review_and_2_when_something_does(capsys, tmp_path):
    old = write(tmp_path / "old.yaml", BASE)
    calm = write(tmp_path / "calm.yaml", change("quorum: 2", "quorum: 3"))
    risky = write(tmp_path / "risky.yaml", change("quorum: 2", "quorum: 1"))
    code, out, err = run(capsys, "diff", old, calm)
    assert code == 0 and "info[D609]" in out and "0 need a security reviewer" in err
    code, out, err = run(capsys, "diff", old, risky)
    expected = f"{risky}:{line_of(BASE, 'quorum: 2')}:15: review[D608]: lead-followup / gate: approval: quorum lowered"
    assert code == 2 and expected + ": 2 -> 1" in out
    code, out, err = run(capsys, "diff", old, old)
    assert code == 0 and out == "" and "no safety-relevant changes" in err


def test_cli_severity_override_and_json_and_github_and_markdown(capsys, tmp_path):
    old = write(tmp_path / "old.yaml", BASE)
    new = write(tmp_path / "new.yaml",
                change("    timeout: 10s\n", "    timeout: 5m\n", change("version: 1", "version: 2")))
    assert run(capsys, "diff", old, new)[0] == 0
    code, out, _ = run(capsys, "diff", old, new, "--severity", "D615=review", "--format", "json")
    report = json.loads(out)
    assert code == 2 and report["needs_review"] and report["findings"][0]["code"] == "D615"
    assert report["findings"][0]["line"] == line_of(BASE, "timeout: 10s") and report["findings"][0]["old"] == 10000
    code, out, _ = run(capsys, "diff", old, new, "--format", "github", "--severity", "d615=review")
    line = line_of(BASE, "timeout: 10s")
    assert code == 2 and out.startswith(f"::warning file={new},line={line},col=14,title=D615 security review::")
    code, out, _ = run(capsys, "diff", old, new, "--format", "markdown")
    assert code == 0 and "| info | D615 | lead-followup | send | timeout lengthened: 10s -> 5m |" in out
    assert run(capsys, "diff", old, new, "--severity", "X1=loud")[0] == 2


def test_cli_exit_1_with_diagnostics_when_either_side_is_invalid(capsys, tmp_path):
    old = write(tmp_path / "old.yaml", BASE)
    bad = write(tmp_path / "bad.yaml", change("    retry: once\n", "    retry: nonexistent\n"))
    code, out, err = run(capsys, "diff", old, bad)
    assert code == 1 and "error[C412]" in out and "cannot diff" in err
    code, out, err = run(capsys, "diff", bad, old)
    assert code == 1 and "Traceback" not in out + err


@pytest.mark.parametrize("argv", [["diff"], ["diff", "one.yaml"], ["diff", "a", "b", "c"],
                                  ["diff", "/no/such.yaml", "/no/other.yaml"]])
def test_cli_usage_errors_exit_2(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and "Traceback" not in out + err


def test_cli_new_irreversible_action_needs_actions_metadata(capsys, tmp_path):
    cases = """\
sealflow: 1
name: cases-flow
version: 1
owner: team:sales
permissions: [crm:read, email:send]
steps:
  - id: fetch
    action: cases.get_lead
    with: {lead_id: lead_1}
    permissions: [crm:read]
"""
    added = cases.replace("version: 1", "version: 2") + """\
  - id: send
    action: cases.send_email
    with: {to: a@example.com, template: welcome}
    permissions: [email:send]
    idempotency_key: "${{ run.id }}"
"""
    old, new = write(tmp_path / "old.yaml", cases), write(tmp_path / "new.yaml", added)
    code, out, _ = run(capsys, "diff", old, new, "--actions", "tests/cases/actions.py")
    assert code == 2 and "review[D610]" in out and "new irreversible action cases.send_email" in out
    code, out, _ = run(capsys, "diff", old, new)
    assert code == 2 and "review[D611]" in out


# ---------------------------------------------------------------- --base against a real git repository

def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env).stdout


@pytest.fixture
def repo(tmp_path, monkeypatch):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "workflows"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    write(repo / "definitions" / "lead-followup.v1.yaml", BASE)
    write(repo / "definitions" / "retired.v1.yaml", change("name: lead-followup", "name: retired"))
    write(repo / "README.md", "workflows\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    monkeypatch.chdir(repo)
    return repo


def test_base_compares_the_working_tree_with_a_git_ref_including_added_and_removed_files(capsys, repo):
    # Given a pull request that adds v2 with a weaker gate, adds a new workflow and removes one
    write(repo / "definitions" / "lead-followup.v2.yaml",
          change("version: 1", "version: 2", change("quorum: 2", "quorum: 1")))
    write(repo / "definitions" / "newcomer.v1.yaml", change("name: lead-followup", "name: newcomer"))
    (repo / "definitions" / "retired.v1.yaml").unlink()
    # When diffed against main
    code, out, err = run(capsys, "diff", "--base", "main", "definitions", "--format", "json")
    # Then every change is there, and a reviewer is needed
    report = json.loads(out)
    assert code == 2, err
    seen = {(f["code"], f["workflow"]) for f in report["findings"]}
    assert seen == {("D608", "lead-followup"), ("D623", "newcomer"), ("D624", "retired")}
    weaker = [f for f in report["findings"] if f["code"] == "D608"][0]
    assert weaker["path"] == "definitions/lead-followup.v2.yaml" and weaker["line"] == line_of(BASE, "quorum: 2")
    removed = [f for f in report["findings"] if f["code"] == "D624"][0]
    assert removed["path"] == "main:definitions/retired.v1.yaml"


def test_base_with_no_change_exits_0_and_defaults_to_definitions(capsys, repo):
    code, out, err = run(capsys, "diff", "--base", "main")
    assert code == 0 and "no safety-relevant changes" in err


def test_base_from_a_subfolder_and_an_invalid_old_side(capsys, repo, monkeypatch):
    # Given a committed definition that no longer validates, fixed in the working tree
    write(repo / "definitions" / "lead-followup.v1.yaml", change("quorum: 2", "quorum: 0"))
    _git(repo, "commit", "-q", "-am", "broken")
    write(repo / "definitions" / "lead-followup.v1.yaml", BASE)
    monkeypatch.chdir(repo / "definitions")
    # When diffed from inside the folder, Then the old side's diagnostics name the ref, exit 1
    code, out, err = run(capsys, "diff", "--base", "HEAD", ".")
    assert code == 1 and "HEAD:definitions/lead-followup.v1.yaml:" in out


@pytest.mark.parametrize("argv", [["diff", "--base", "no-such-ref"], ["diff", "--base", "main", "/"]])
def test_base_with_an_unknown_ref_or_a_path_outside_the_repo_is_a_usage_error(capsys, repo, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and "Traceback" not in out + err and err.strip()


WAITING = """\
sealflow: 1
name: scan-wait
version: 1
owner: team:t
input: {schema: {type: object, required: [file_id], properties: {file_id: {type: string}}}}
steps:
  - id: verdict
    wait: {event: scan.finished, source: scanner, match: "event.data.file_id == input.file_id", timeout: 1h}
"""


@pytest.mark.parametrize(("old", "new", "named"), [
    ("source: scanner", "source: other", "source"),
    ("event: scan.finished", "event: scan.done", "event"),
    ("match: \"event.data.file_id == input.file_id\"", "match: \"true\"", "match"),
    ("timeout: 1h}", "timeout: 1h, schema: {type: object}}", "schema"),
])
def test_d633_a_change_in_what_a_wait_takes_from_outside_needs_review(old, new, named):
    # Given a wait for the scanner's verdict, and the same definition with its event changed
    found = findings(change(old, new, WAITING), WAITING)
    # Then the change is reported for review, naming what changed
    (d,) = only(found, "D633")
    assert f"{named} changed" in d.message and needs_review(found)


CALLING = """\
sealflow: 1
name: render
version: 1
owner: team:t
steps:
  - id: generate
    action: t.generate
    callback: {timeout: 30m}
"""


def test_d634_a_callback_added_or_changed_needs_review():
    without = CALLING.replace("    callback: {timeout: 30m}\n", "")
    (added,) = only(findings(CALLING, without), "D634")
    (changed,) = only(findings(change("30m", "2h", CALLING), CALLING), "D634")
    assert "added" in added.message and "changed" in changed.message


def test_d608_a_gate_made_editable_needs_review():
    gated = CALLING.replace("    action: t.generate\n    callback: {timeout: 30m}\n",
                            "    approval: {approvers: [role:m], timeout: 1h, show: input}\n")
    editable = gated.replace("show: input}", "show: input, editable: {schema: {type: object}}}")
    (found,) = only(findings(editable, gated), "D608")
    assert "made editable" in found.message
