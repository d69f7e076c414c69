"""What a reviewer is told of the step that runs once a gate is approved: its arguments rendered from what the run
holds now, or as the workflow writes them when they cannot be (never an error instead of the page)."""

from __future__ import annotations

from interp_helpers import S, approval, make_plan

from sealflow.dsl.errors import DslError
from sealflow.runtime.review import _will_run, reasons_in


def _plan():
    return make_plan(S("ask", "approval", approval=approval()),
                     S("pay", "action", action="t.pay", args={"to": "${{ input.customer }}"}))


def test_the_next_steps_arguments_are_rendered_when_they_can_be():
    # Given an approval step followed by pay, and a renderer that fills in the customer
    will_run, rule = _will_run(_plan(), {"step": "ask"}, None, lambda args: {"to": "c-42"})
    # Then the reviewer sees pay with the rendered arguments, asked for by the approval step
    assert will_run == {"step": "pay", "kind": "action", "action": "t.pay", "args": {"to": "c-42"}, "rendered": True}
    assert rule["kind"] == "approval_step" and rule["step"] == "ask"


def test_arguments_that_cannot_be_rendered_yet_are_shown_as_written():
    # Given a renderer that cannot evaluate an expression yet
    def refuse(args):
        raise DslError("steps.later is not known yet")

    will_run, _ = _will_run(_plan(), {"step": "ask"}, None, refuse)
    # Then the arguments are shown as the workflow writes them, and said to be so
    assert will_run["args"] == {"to": "${{ input.customer }}"} and will_run["rendered"] is False


def test_the_reasons_of_an_answer_are_its_reason_fields():
    assert reasons_in({"reason": "damaged", "reasons": ["late", ""], "other": "x"}) == ["damaged", "late"]
    assert reasons_in(["not", "a", "dict"]) == [] and reasons_in({"why": "  "}) == []
