"""The security diff sees risk-adding changes that touch no permission or budget (issue 9, part 4).

A table: one case per finding. Each case runs twice, with action metadata (``--actions``) and
without it (as in the CI template), and must need review (exit 2 in ``sealflow diff``) both times.
"""

from __future__ import annotations

import pytest

from sealflow.dsl.api import check_bytes
from sealflow.dsl.diff import diff_plans, needs_review
from sealflow.dsl.model import ActionInfo

BASE = """\
sealflow: 1
name: refund
version: 1
owner: team:billing
input:
  schema:
    type: object
    additionalProperties: false
    required: [order_id, amount]
    properties:
      order_id: {type: string}
      amount: {type: integer, maximum: 500}
permissions: [orders:read, orders:write, payments:refund]
concurrency: {key: "${{ input.order_id }}", limit: 1}
budget: {max_steps: 20}
retry:
  transient: {on: [timeout, network], max_attempts: 3}
  once: {max_attempts: 1}
defaults: {retry: transient}
steps:
  - id: fetch
    action: orders.get
    with: {order_id: "${{ input.order_id }}"}
    permissions: [orders:read]
    on_error:
      - {errors: [invalid_request], next: give_up}
  - id: classify
    ai:
      model: default
      prompt: {template: "Classify ${{ steps.fetch.output }}"}
      output_schema:
        type: object
        additionalProperties: false
        required: [risk]
        properties: {risk: {enum: [low, high]}}
  - id: route
    switch:
      - {when: "steps.classify.output.risk == 'high'", next: give_up}
      - {next: hold}
  - id: hold
    action: orders.hold
    with: {order_id: "${{ input.order_id }}"}
    permissions: [orders:write]
    idempotency_key: "${{ run.id }}:hold"
    compensate:
      action: orders.release
      with: {order_id: "${{ input.order_id }}"}
      timeout: 10s
  - id: gate
    approval:
      approvers: [role:billing-lead]
      timeout: 4h
      show: "steps.fetch.output"
  - id: refund
    action: payments.refund
    with: {order_id: "${{ input.order_id }}"}
    permissions: [payments:refund]
    idempotency_key: "${{ run.id }}:refund"
    retry: once
  - id: done
    succeed: {}
  - id: give_up
    fail: {error: invalid_request, message: "not refunded"}
"""

ACTIONS = {
    "orders.get": ActionInfo(name="orders.get", permissions=("orders:read",), effect="read"),
    "orders.hold": ActionInfo(name="orders.hold", permissions=("orders:write",), effect="write"),
    "orders.release": ActionInfo(name="orders.release", permissions=("orders:write",), effect="write"),
    "payments.refund": ActionInfo(name="payments.refund", permissions=("payments:refund",), effect="irreversible"),
}


def edit(*pairs: str, text: str = BASE) -> str:
    for old, new in zip(pairs[::2], pairs[1::2], strict=True):
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
        text = text.replace(old, new)
    return text


def diff(new_text: str, actions):
    def plan(text, path):
        result = check_bytes(text.encode(), path, actions=actions)
        assert result.ok and result.plan is not None, [d.format() for d in result.diagnostics]
        return result

    old, new = plan(BASE, "old.yaml"), plan(new_text, "new.yaml")
    return diff_plans(old.plan, new.plan, locate=new.document.locate, path="new.yaml")


REFUND = "  - id: refund\n"
CASES = {
    "reauthorize false added where the default applied": (
        "D621", "reauthorize: false added", edit("    retry: once\n", "    retry: once\n    reauthorize: false\n")),
    "when added to an approval step": (
        "D608", "approval step condition added",
        edit("  - id: gate\n    approval:", "  - id: gate\n    when: \"input.amount > 100\"\n    approval:")),
    "a new switch case reaching the irreversible step around the gate": (
        "D630", "new route reaches it without passing approval gate",
        edit("      - {when: \"steps.classify.output.risk == 'high'\", next: give_up}\n",
             "      - {when: \"steps.classify.output.risk == 'high'\", next: give_up}\n"
             "      - {when: \"input.amount < 10\", next: refund}\n")),
    "an on_error route reaching the irreversible step around the gate": (
        "D630", "new route reaches it",
        edit("      - {errors: [invalid_request], next: give_up}\n",
             "      - {errors: [invalid_request], next: give_up}\n      - {errors: [timeout], next: refund}\n")),
    "a next: jumping over the gate": (
        "D630", "approval gate",
        edit("      - {next: hold}\n", "      - {when: \"input.amount < 5\", next: shortcut}\n      - {next: hold}\n",
             "  - id: give_up\n",
             "  - id: shortcut\n    set: {note: \"'small'\"}\n    next: refund\n  - id: give_up\n")),
    "an approval on_timeout routing to the irreversible step": (
        "D630", "approval gate", edit("      timeout: 4h\n", "      timeout: 4h\n      on_timeout: {next: refund}\n")),
    "an existing action reused in a new step before the gate": (
        "D630", "payments.refund (behind it everywhere before) is now reused ahead of approval gate",
        edit("  - id: gate\n", "  - id: early_refund\n    action: payments.refund\n"
             "    with: {order_id: \"${{ input.order_id }}\"}\n    permissions: [payments:refund]\n"
             "    idempotency_key: \"${{ run.id }}:early\"\n    retry: once\n  - id: gate\n")),
    "output_schema removed": (
        "D622", "output_schema removed",
        edit("      output_schema:\n        type: object\n        additionalProperties: false\n"
             "        required: [risk]\n        properties: {risk: {enum: [low, high]}}\n", "")),
    "output_schema emptied": (
        "D622", "emptied",
        edit("      output_schema:\n        type: object\n        additionalProperties: false\n"
             "        required: [risk]\n        properties: {risk: {enum: [low, high]}}\n",
             "      output_schema: {}\n")),
    "output_schema additionalProperties opened": (
        "D622", "additionalProperties opened", edit("        additionalProperties: false\n        required: [risk]",
                                                   "        required: [risk]")),
    "output_schema required widened": (
        "D622", "no longer requires risk", edit("        required: [risk]\n", "")),
    "output_schema enum widened": (
        "D622", "enum widened with 'none'", edit("{enum: [low, high]}", "{enum: [low, high, none]}")),
    "show made constant": (
        "D608", "show made constant", edit("      show: \"steps.fetch.output\"\n", "      show: \"'a refund'\"\n")),
    "show removed": (
        "D608", "show removed", edit("      show: \"steps.fetch.output\"\n", "")),
    "compensation removed": (
        "D628", "compensation removed",
        edit("    compensate:\n      action: orders.release\n      with: {order_id: \"${{ input.order_id }}\"}\n"
             "      timeout: 10s\n", "")),
    "concurrency limit raised": (
        "D629", "run concurrency limit raised: 1 -> 50", edit("limit: 1}", "limit: 50}")),
    "concurrency limit removed": (
        "D629", "run concurrency limit removed", edit("concurrency: {key: \"${{ input.order_id }}\", limit: 1}\n", "")),
    "input schema additionalProperties opened": (
        "D627", "additionalProperties opened", edit("    additionalProperties: false\n    required: [order_id",
                                                    "    required: [order_id")),
    "input schema required widened": (
        "D627", "no longer requires amount", edit("required: [order_id, amount]", "required: [order_id]")),
    "input schema bound raised": (
        "D627", "maximum raised", edit("maximum: 500}", "maximum: 50000}")),
    "approval timeout lengthened": (
        "D608", "timeout lengthened: 4h -> 7d", edit("      timeout: 4h\n", "      timeout: 7d\n")),
    "retries added to an irreversible step": (
        "D605", "runs with retries",
        edit("  - id: gate\n", "  - id: gate2\n    approval: {approvers: [role:cfo], timeout: 1h}\n"
             "  - id: refund_again\n    action: payments.refund\n    with: {order_id: \"${{ input.order_id }}\"}\n"
             "    permissions: [payments:refund]\n    idempotency_key: \"${{ run.id }}:again\"\n  - id: gate\n")),
}


@pytest.mark.parametrize("with_actions", [True, False], ids=["with-actions", "without-actions"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_given_a_risk_adding_change_when_diffed_then_a_review_finding_names_it(case, with_actions):
    code, words, new_text = CASES[case]
    new_text = new_text.replace("version: 1\n", "version: 2\n", 1)
    found = diff(new_text, ACTIONS if with_actions else None)
    matching = [f for f in found if f.code == code and words in f.message]
    assert matching, f"no {code} with {words!r} in {[f.format() for f in found]}"
    assert all(f.severity == "review" for f in matching)
    assert all(f.location is not None and f.location.path == "new.yaml" for f in matching)
    assert needs_review(found)


def test_given_the_same_definition_when_diffed_then_no_risk_finding():
    assert diff(BASE.replace("version: 1\n", "version: 2\n", 1), ACTIONS) == []


def test_given_a_read_only_step_moved_before_the_gate_with_actions_then_no_gate_finding():
    # orders.get is a read: with metadata, a new route to it around the gate is not a D630
    new = edit("  - id: done\n", "  - id: reread\n    action: orders.get\n"
               "    with: {order_id: \"${{ input.order_id }}\"}\n    permissions: [orders:read]\n  - id: done\n")
    assert not [f for f in diff(new, ACTIONS) if f.code == "D630"]


@pytest.mark.parametrize("case", ["a new switch case reaching the irreversible step around the gate",
                                  "when added to an approval step",
                                  "reauthorize false added where the default applied"])
def test_given_the_ci_command_without_actions_when_a_risk_is_added_then_it_exits_2_naming_it(capsys, tmp_path, case):
    from sealflow.cli import main

    code_expected, words, new_text = CASES[case]
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    (tmp_path / "old" / "refund.v1.yaml").write_text(BASE)
    (tmp_path / "new" / "refund.v1.yaml").write_text(new_text)
    code = main(["diff", str(tmp_path / "old" / "refund.v1.yaml"), str(tmp_path / "new" / "refund.v1.yaml")])
    out, _ = capsys.readouterr()
    assert code == 2
    assert f"review[{code_expected}]" in out and words in out
