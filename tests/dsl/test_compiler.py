"""The compiler: plans with defaults applied, explicit edges, and every structural error located."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dsl_helpers import HEADER, check, codes

from sealflow.dsl.api import check_bytes, check_file, compile_file
from sealflow.dsl.errors import DefinitionError
from sealflow.dsl.model import ActionInfo
from sealflow.dsl.plan import Plan

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "definitions" / "lead-qualification.v1.yaml"

SIMPLE = """\
permissions: [crm:read]
defaults: {timeout: 10s, retry: transient}
retry:
  transient:
    on: [timeout, network]
    max_attempts: 3
    backoff: {initial: 200ms, factor: 3, max: 2s, jitter: equal}
steps:
  - id: a
    action: crm.get_lead
    permissions: [crm:read]
  - id: b
    set: {x: "1 + 1"}
"""


def test_given_the_dsl_example_when_compiled_then_defaults_retry_and_durations_are_resolved():
    plan = compile_file(EXAMPLE)
    record = plan.step("record")
    assert record.timeout_ms == 20_000
    assert record.retry.name == "transient" and record.retry.max_attempts == 3
    assert (record.retry.initial_ms, record.retry.max_ms, record.retry.jitter) == (200, 2000, "full")
    assert plan.step("follow_up").retry.max_attempts == 1
    assert record.gate is not None and record.gate.approvers == ("role:sales-manager",)
    assert record.gate.timeout_ms == 24 * 3600 * 1000
    assert plan.budget.max_runtime_ms == 600_000
    route = plan.step("route")
    assert [(e.kind, e.target) for e in route.edges] == [("case", "done"), ("default", "record")]
    assert plan.step("done").next is None and plan.step("follow_up").next == "done"


def test_given_a_step_without_next_when_compiled_then_it_falls_through_and_the_last_goes_to_end():
    plan = check(SIMPLE).plan
    assert plan.step("a").next == "b" and plan.step("b").next == "end"
    assert plan.step("a").retry.factor == 3.0 and plan.step("a").retry.jitter == "equal"


def test_given_the_same_source_when_compiled_twice_then_the_digest_is_the_same():
    first = compile_file(EXAMPLE)
    second = compile_file(EXAMPLE)
    assert first.digest == second.digest and first.digest.startswith("sha256:")
    assert first.digest == first.compute_digest()


def test_given_comments_and_formatting_changes_when_compiled_then_the_digest_is_unchanged():
    text = EXAMPLE.read_text()
    reformatted = "# a new comment\n" + text.replace("budget: {max_steps: 20, max_runtime: 10m, max_tokens: 5000}",
                                                    "budget:\n  max_steps: 20\n  max_runtime: 10m\n  max_tokens: 5000")
    assert check_bytes(reformatted.encode(), "x.yaml").plan.digest == compile_file(EXAMPLE).digest


@pytest.mark.parametrize("old, new", [
    ("max_attempts: 3", "max_attempts: 4"),
    ("timeout: 20s", "timeout: 21s"),
    ("role:sales-manager", "role:sales-director"),
    ("jitter: full", "jitter: none"),
    ("classification != 'high'", "classification != 'medium'"),
    ("    retry: once\n", "    retry: transient\n"),
    ("version: 1", "version: 2"),
])
def test_given_a_change_of_behaviour_when_compiled_then_the_digest_changes(old, new):
    text = EXAMPLE.read_text()
    assert old in text
    changed = check_bytes(text.replace(old, new, 1).encode(), "x.yaml")
    assert changed.plan is not None, [d.format() for d in changed.diagnostics]
    assert changed.plan.digest != compile_file(EXAMPLE).digest


def test_given_a_plan_when_serialised_then_it_round_trips_and_the_digest_is_first():
    plan = compile_file(EXAMPLE)
    text = plan.to_json()
    assert text.lstrip().startswith('{\n  "digest"')
    assert Plan.from_json(text) == plan


def test_given_a_tampered_plan_json_when_loaded_then_the_digest_mismatch_is_refused():
    text = compile_file(EXAMPLE).to_json().replace('"max_attempts": 3', '"max_attempts": 9', 1)
    with pytest.raises(ValueError, match="digest mismatch"):
        Plan.from_json(text)


def test_given_a_plan_when_mutated_then_it_refuses():
    plan = compile_file(EXAMPLE)
    with pytest.raises(Exception):
        plan.name = "other"  # type: ignore[misc]


def test_given_an_invalid_file_when_compiled_then_every_error_is_raised_together(tmp_path):
    path = tmp_path / "wf.yaml"
    path.write_text(HEADER + "steps:\n  - {id: a, next: nowhere, set: {x: \"1\"}}\n  - {id: a, set: {x: \"2\"}}\n")
    with pytest.raises(DefinitionError) as info:
        compile_file(path)
    assert {"C401", "C402"} <= {d.code for d in info.value.diagnostics}


def test_given_two_errors_in_different_steps_when_checked_then_both_are_reported_in_file_order():
    result = check("""\
        steps:
          - {id: a, set: {x: "1"}, timeout: 7h}
          - {id: b, set: {x: "2"}, next: nope}
        """)
    found = [(d.code, d.location.line) for d in result.diagnostics]
    assert found == [("C408", 6), ("C401", 7)]


def test_given_a_loop_with_max_steps_when_compiled_then_it_is_accepted():
    result = check("""\
        budget: {max_steps: 10}
        steps:
          - {id: poll, set: {n: "1"}}
          - id: again
            switch:
              - {when: "steps.poll.output.n < 3", next: poll}
              - {next: end}
        """)
    assert result.ok, [d.format() for d in result.diagnostics]


def test_given_a_retry_class_on_a_never_retryable_class_when_compiled_then_each_is_named():
    result = check("""\
        retry:
          bad: {on: [timeout, unauthorized, budget_exceeded], max_attempts: 2}
        steps:
          - {id: a, set: {x: "1"}, retry: bad}
        """)
    assert [(d.code, d.location.line) for d in result.diagnostics] == [("C407", 6), ("C407", 6)]
    assert "unauthorized" in result.diagnostics[0].message


ACTIONS = {
    "crm.get_lead": ActionInfo(name="crm.get_lead", permissions=("crm:read",), effect="read"),
    "email.send": ActionInfo(name="email.send", permissions=("email:send",), effect="irreversible"),
}


def test_given_action_metadata_when_an_irreversible_action_has_no_key_then_c410():
    result = check("""\
        permissions: [email:send]
        steps:
          - {id: send, action: email.send, permissions: [email:send]}
        """, actions=ACTIONS)
    assert codes(result) == ["C410"]
    assert 'idempotency_key: "${{ run.id }}:send"' in result.diagnostics[0].hint


def test_given_action_metadata_when_a_step_lacks_the_action_permission_then_c413_and_unknown_is_c411():
    result = check("""\
        permissions: [crm:read]
        steps:
          - {id: a, action: crm.get_lead}
          - {id: b, action: crm.get_leed, permissions: [crm:read]}
        """, actions=ACTIONS)
    assert codes(result) == ["C413", "C411"]
    assert "did you mean 'crm.get_lead'" in result.diagnostics[1].hint


def test_given_action_metadata_when_compiled_then_effects_are_in_the_plan_but_not_in_the_digest():
    body = """\
        permissions: [crm:read]
        steps:
          - {id: a, action: crm.get_lead, permissions: [crm:read]}
        """
    with_meta = check(body, actions=ACTIONS).plan
    without = check(body).plan
    assert with_meta.actions["crm.get_lead"].effect == "read" and without.actions == {}
    assert with_meta.digest == without.digest


def test_given_a_write_action_when_compiled_then_reauthorize_defaults_on_by_effect_outside_the_digest():
    actions = {"crm.add_note": ActionInfo(name="crm.add_note", permissions=("crm:write",), effect="write")}
    body = """\
        permissions: [crm:write]
        steps:
          - {id: a, action: crm.add_note, permissions: [crm:write]}
          - {id: b, action: crm.add_note, permissions: [crm:write], reauthorize: false}
        """
    plan = check(body, actions=actions).plan
    a, b = plan.step("a"), plan.step("b")
    assert a.needs_reauthorization(plan.actions["crm.add_note"].effect) is True
    assert b.needs_reauthorization("write") is False and a.needs_reauthorization("read") is False
    assert plan.digest == check(body).plan.digest


def test_given_a_referenced_output_schema_when_compiled_then_it_is_inlined(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "out.json").write_text('{"type": "object", "required": ["x"]}')
    path = tmp_path / "wf.yaml"
    path.write_text(HEADER + """\
budget: {max_tokens: 100}
steps:
  - id: a
    ai:
      model: default
      prompt: {template: "hi"}
      output_schema: {$ref: schemas/out.json}
""")
    plan = check_file(path).plan
    assert plan.step("a").ai.output_schema == {"type": "object", "required": ["x"]}


def test_given_a_definition_in_definitions_when_its_file_name_disagrees_then_c415(tmp_path):
    folder = tmp_path / "definitions"
    folder.mkdir()
    path = folder / "wf.v2.yaml"
    path.write_text(HEADER + 'steps:\n  - {id: a, set: {x: "1"}}\n')
    result = check_file(path)
    assert codes(result) == ["C415"] and "wf.v1.yaml" in result.diagnostics[0].hint


def test_given_isolation_on_a_step_when_compiled_then_the_plan_carries_it_and_a_wrong_value_is_refused():
    result = check("""\
        retry:
          lost: {on: [worker_lost], max_attempts: 3}
        steps:
          - {id: a, set: {x: "1"}, isolation: process, retry: lost}
          - {id: b, set: {x: "2"}}
        """)
    assert result.ok, [d.format() for d in result.diagnostics]
    assert [s.isolation for s in result.plan.steps] == ["process", None]
    assert result.plan.steps[0].retry.on == ("worker_lost",)
    wrong = check("""\
        steps:
          - {id: a, set: {x: "1"}, isolation: fork}
        """)
    assert not wrong.ok and "fork" in wrong.diagnostics[0].format()


def test_a_plan_that_does_not_use_a_later_field_keeps_the_digest_and_stored_json_it_had_before_it():
    # Given a wait for a time (the language knew it before waits for events) and its compiled plan
    from sealflow.dsl.api import compile_bytes
    from sealflow.dsl.plan import Plan

    plan = compile_bytes(b"sealflow: 1\nname: pause\nversion: 1\nowner: team:t\nsteps:\n"
                         b"  - id: cool_down\n    wait: {for: 10m}\n", "<pause>")
    stored = json.loads(plan.to_json())
    # Then its JSON carries none of the event wait's fields (null or not)
    assert set(stored["steps"][0]["wait"]) == {"for_ms", "until"}
    assert b"timeout_ms" not in plan.canonical_json().split(b'"wait"')[1].split(b"}")[0]
    # And a plan stored before those fields existed loads with its recorded digest
    assert Plan.from_json(json.dumps(stored)).digest == plan.digest
