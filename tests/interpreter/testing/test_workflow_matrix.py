"""`sealflow test --matrix` and `--coverage` (issue 34): failures derived from the definition, what the tests reach."""

from __future__ import annotations

from pathlib import Path

import pytest

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


@action("t.sms", effect="write", honours_idempotency_key=False, registry=LOCAL)
def sms(ctx: object, key: str) -> dict:
    return {"texted": key}


#: a write without an idempotency key, and a text message whose gateway cannot deduplicate
UNKEYED = """\
sealflow: 1
name: unkeyed
version: 1
owner: team:t
steps:
  - id: send
    action: t.send
    with: {key: k}
  - id: text
    action: t.sms
    with: {key: k}
"""


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
    # a crash at each step is recovered: the run completes as it did without it
    assert {step: row["crash"].outcome for step, row in table.rows.items()} == dict.fromkeys(table.rows, "completed")
    assert table.ok, table.problems()
    assert "every scenario holds" in matrix.render(table)


def test_a_gate_that_lets_the_run_go_on_when_it_expires_is_flagged() -> None:
    # Given a definition whose approval, unanswered, routes on to the write
    plan = compile_bytes(ESCALATING.encode(), "<escalating>",
                         actions={name: action_info(act) for name, act in LOCAL.items()})
    # When its matrix is derived
    table = matrix.derive(plan, registry=LOCAL, real_actions=frozenset({"t.send"}))
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


def test_a_crash_flags_a_write_without_a_key_and_holds_an_action_that_cannot_deduplicate() -> None:
    # Given a write with no idempotency key, then a text message whose gateway cannot deduplicate
    plan = compile_bytes(UNKEYED.encode(), "<unkeyed>",
                         actions={name: action_info(act) for name, act in LOCAL.items()})
    # When its matrix is derived
    table = matrix.derive(plan, registry=LOCAL, real_actions=frozenset({"t.send", "t.sms"}))
    # Then a crash after the write is flagged: it wrote again, with no key for its target to apply it once
    crash = table.rows["send"]["crash"]
    assert not crash.ok and any("applied twice" in p and "idempotency_key" in p for p in crash.problems), \
        crash.problems
    # And a crash after the text message is held for a person (outcome unknown), not sent again
    held = table.rows["text"]["crash"]
    assert held.ok and held.outcome == "held", held.problems
    assert "!completed" in matrix.render(table)


@pytest.mark.parametrize("definition", sorted(p.name for p in (ROOT / "definitions").glob("*.yaml")
                                              if p.name != LEAD.name))
def test_every_shipped_definition_survives_its_matrix(definition: str) -> None:
    # Given a definition shipped in definitions/, with its test file's cases as bases
    import_actions((), demo=True)
    path = ROOT / "definitions" / definition
    # When its matrix is derived
    table = matrix.derive(compile_file(path), cases_for(path), world=demo_world)
    # Then every scenario of every step holds (a crash, a revocation, a rejected gate, ...)
    assert table.ok, table.problems()


def test_a_matrix_over_an_unanswered_write_says_it_was_not_called_and_how_to_allow_it() -> None:
    # Given a project's write action that no test file answers and real_actions does not list
    plan = compile_bytes(UNKEYED.encode(), "<unkeyed>",
                         actions={name: action_info(act) for name, act in LOCAL.items()})
    # When its matrix is derived
    table = matrix.derive(plan, registry=LOCAL)
    # Then its cells fail, saying the action was not called and how to answer or allow it
    problems = table.problems()
    assert not table.ok and any("unanswered: step send calls t.send (write)" in p and "real_actions" in p
                                for p in problems), problems
