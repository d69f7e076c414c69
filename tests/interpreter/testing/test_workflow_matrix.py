"""`sealflow test --matrix` and `--coverage` (issue 34): failures derived from the definition, what the tests reach."""

from __future__ import annotations

from pathlib import Path

from sealflow.cli.actions_loader import action_info
from sealflow.cli.commands.test import demo_world
from sealflow.cli.session import import_actions
from sealflow.dsl.api import compile_bytes, compile_file
from sealflow.execution.actions import Registry, action
from sealflow.testing.workflows import matrix, run_file
from sealflow.testing.workflows.coverage import coverage
from sealflow.testing.workflows.spec import cases_for

ROOT = Path(__file__).resolve().parents[3]
LEAD = ROOT / "definitions" / "lead-qualification.v1.yaml"

LOCAL = Registry()


@action("t.fetch", registry=LOCAL)
def fetch(ctx: object, key: str) -> dict:
    return {"key": key}


@action("t.send", effect="write", registry=LOCAL)
def send(ctx: object, key: str) -> dict:
    return {"sent": key}


ESCALATING = """\
sealflow: 1
name: escalating
version: 1
owner: team:t
retry:
  transient: {on: [unavailable, timeout], max_attempts: 3, backoff: {initial: 1s}}
steps:
  - id: fetch
    action: t.fetch
    with: {key: k}
    retry: transient
  - id: review
    approval:
      approvers: [role:lead]
      timeout: 1h
      on_timeout: {next: send}
  - id: send
    action: t.send
    with: {key: k}
    idempotency_key: "${{ run.id }}:send"
"""


def test_the_matrix_of_the_lead_definition_holds_in_every_scenario() -> None:
    # Given the lead definition with its test file's cases
    import_actions((), demo=True)
    plan = compile_file(LEAD)
    # When its matrix is derived
    table = matrix.derive(plan, cases_for(LEAD), world=demo_world)
    # Then every step that calls out has its scenarios, the gate its two, and all hold
    assert set(table.rows) == {"fetch_lead", "classify", "record", "follow_up"}
    assert table.rows["fetch_lead"]["retry"].outcome == "ok x5"
    assert table.rows["follow_up"]["retry"].outcome == "-"  # retry: once
    assert table.rows["record"]["reject"].outcome == "failed"
    assert table.ok, table.problems()
    assert "every scenario holds" in matrix.render(table)


def test_a_gate_that_lets_the_run_go_on_when_it_expires_is_flagged() -> None:
    # Given a definition whose approval, unanswered, routes on to the write
    plan = compile_bytes(ESCALATING.encode(), "<escalating>",
                         actions={name: action_info(act) for name, act in LOCAL.items()})
    # When its matrix is derived
    table = matrix.derive(plan, registry=LOCAL)
    # Then the retry scenarios hold, and the expiry is flagged: the gate did not fail closed and the write ran
    assert table.rows["fetch"]["retry"].ok and table.rows["fetch"]["exhausted"].ok
    expire = table.rows["review"]["expire"]
    assert not expire.ok and not table.ok
    assert any("did not fail closed" in p for p in expire.problems)
    assert any("steps after the gate ran: send" in p for p in expire.problems)
    assert "!completed" in matrix.render(table)


def test_coverage_names_what_no_case_reached(tmp_path: Path) -> None:
    # Given one case of the lead definition that takes the low branch only
    import_actions((), demo=True)
    path = tmp_path / "lead.test.yaml"
    path.write_text(f"sealflow_test: 1\ndefinition: {LEAD}\ncases:\n  - name: low\n    input: {{lead_id: lead_midco}}\n"
                    "    answers: {classify: {classification: low, reason: r}}\n    expect: {state: completed}\n")
    result = run_file(path, world=demo_world)
    # When its coverage is computed
    cov = coverage(result.plan, result.cases)
    # Then the steps and the branch not taken are named
    assert set(cov.parts["steps"].missing) == {"record", "follow_up"}
    assert cov.parts["branches"].missing == ["route -> record"]
    assert not cov.complete
