"""Lint: one test per rule, silencing with a reason, and clean definitions."""

from __future__ import annotations

from dsl_helpers import check

from sealflow.dsl.lint import RULES
from sealflow.dsl.model import ActionInfo

ACTIONS = {
    "crm.get_lead": ActionInfo(name="crm.get_lead", permissions=("crm:read",), effect="read"),
    "email.send": ActionInfo(name="email.send", permissions=("email:send",), effect="irreversible"),
    "db.lock_row": ActionInfo(name="db.lock_row", permissions=(), effect="write"),
}


def lint_codes(body: str, actions=ACTIONS) -> list[tuple[str, str, int]]:
    result = check(body, actions=actions, lint=True)
    assert result.plan is not None, [d.format() for d in result.diagnostics]
    return [(d.code, d.severity, d.location.line) for d in result.diagnostics]


MODEL_TO_EMAIL = """\
permissions: [email:send]
budget: {max_tokens: 1000}
steps:
  - id: draft
    ai: {model: default, prompt: {template: "Write to the customer"}}
__BETWEEN__  - id: send
    action: email.send
    permissions: [email:send]
    with: {to: "x@example.com", body: "${{ steps.draft.output }}"}
    idempotency_key: "${{ run.id }}"
"""


def test_l501_given_model_output_into_an_irreversible_action_when_linted_then_warned_at_the_reference():
    result = check(MODEL_TO_EMAIL.replace("__BETWEEN__", ""), actions=ACTIONS, lint=True)
    [finding] = [d for d in result.diagnostics if d.code == "L501"]
    assert finding.severity == "warning"
    assert (finding.location.line, finding.location.column) == (13, 44)
    assert "draft" in finding.message and "send" in finding.message


def test_l501_given_an_approval_in_between_when_linted_then_no_warning():
    between = "  - id: check\n    approval: {approvers: [role:editor], timeout: 1h}\n"
    assert "L501" not in [c for c, _, _ in lint_codes(MODEL_TO_EMAIL.replace("__BETWEEN__", between))]


def test_l501_given_validate_on_the_model_step_when_linted_then_no_warning():
    body = MODEL_TO_EMAIL.replace("__BETWEEN__", "").replace(
        'prompt: {template: "Write to the customer"}}',
        'prompt: {template: "Write to the customer"}}\n    validate: ["len(output) < 2000"]')
    assert "L501" not in [c for c, _, _ in lint_codes(body)]


def test_l501_given_model_output_laundered_through_a_set_step_when_linted_then_still_warned():
    between = '  - id: copy\n    set: {text: "steps.draft.output"}\n'
    body = MODEL_TO_EMAIL.replace("__BETWEEN__", between).replace("steps.draft.output }}", "steps.copy.output.text }}")
    assert "L501" in [c for c, _, _ in lint_codes(body)]


def test_l502_given_an_approval_that_routes_on_timeout_when_linted_then_warned():
    codes = lint_codes("""\
        steps:
          - id: gate
            approval: {approvers: [role:x], timeout: 1h, on_timeout: {next: fallback}}
          - {id: ok, succeed: {}}
          - {id: fallback, set: {x: "1"}}
        """)
    assert ("L502", "warning", 7) in codes


def test_l503_given_a_declared_but_unused_permission_when_linted_then_warned_at_it():
    codes = lint_codes("""\
        permissions: [crm:read, billing:charge]
        steps:
          - {id: a, action: crm.get_lead, permissions: [crm:read]}
        """)
    assert codes == [("L503", "warning", 5)]


def test_l504_given_a_model_step_and_no_token_or_cost_budget_when_linted_then_warned():
    codes = lint_codes("""\
        budget: {max_steps: 5}
        steps:
          - {id: a, ai: {model: default, prompt: {template: "hi"}}}
        """)
    assert ("L504", "warning", 5) in codes


def test_l505_given_an_agent_without_max_tool_calls_when_linted_then_warned():
    codes = lint_codes("""\
        permissions: [crm:read]
        budget: {max_cost_usd: 1}
        steps:
          - id: research
            permissions: [crm:read]
            agent: {model: default, goal: "find the lead", tools: [crm.get_lead], max_steps: 5}
        """)
    assert ("L505", "warning", 10) in codes


def test_l506_given_a_lock_held_across_an_approval_or_a_long_wait_when_linted_then_warned():
    codes = lint_codes("""\
        steps:
          - {id: gate, approval: {approvers: [role:x], timeout: 1h}, lock: "row-1"}
          - {id: pause, wait: {for: 2h}, lock: "row-1"}
          - {id: short, wait: {for: 5s}, lock: "row-1"}
        """)
    assert [c for c in codes if c[0] == "L506"] == [("L506", "warning", 6), ("L506", "warning", 7)]


def test_l507_given_no_action_metadata_when_linted_then_an_info_note_says_so():
    result = check("""\
        permissions: [crm:read]
        steps:
          - {id: a, action: crm.get_lead, permissions: [crm:read]}
        """, lint=True)
    assert [(d.code, d.severity) for d in result.diagnostics] == [("L507", "info")]


def test_given_a_rule_silenced_with_a_reason_when_linted_then_reported_as_info_with_the_reason():
    body = MODEL_TO_EMAIL.replace("__BETWEEN__", "").replace(
        "    idempotency_key:", "    lint: {ignore: [L501], reason: drafts go to a test inbox}\n    idempotency_key:")
    result = check(body, actions=ACTIONS, lint=True)
    [finding] = [d for d in result.diagnostics if d.code == "L501"]
    assert finding.severity == "info" and "drafts go to a test inbox" in finding.message


def test_given_an_unknown_rule_silenced_when_linted_then_l500():
    codes = lint_codes("""\
        steps:
          - {id: a, set: {x: "1"}, lint: {ignore: [L999], reason: because}}
        """)
    assert ("L500", "error", 6) in codes


def test_every_rule_has_a_code_title_and_rationale():
    for code, rule in RULES.items():
        assert rule.code == code and rule.title and len(rule.rationale) > 40
