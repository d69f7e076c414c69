"""The approvals page gives a reviewer what it needs to judge a gate: what the model proposed and the reasons it
gave, the checks its answer passed, the rule that asked, the step that runs once approved and its arguments, who
approved and how many more must, and the time left; approving works with a plain form post."""

from __future__ import annotations

import re

import pytest
from interp_helpers import FakeProvider, S, gate, make_plan
from test_ui_pages import csrf_of, sign_in, token

from sealflow.dsl.plan import AiPlan, ValidateRulePlan
from sealflow.execution.actions import action


@pytest.fixture
def refund_run(rt, registry):
    """alice's run: the model proposes a refund of 120 with its reason; recording it needs two managers'
    approval (above 100) before ``t.pay`` pays it."""
    paid = []
    action("t.record", registry=registry)(lambda ctx, amount: {"amount": amount})

    @action("t.pay", registry=registry, effect="write")
    def pay(ctx, amount, to):
        paid.append((amount, to))
        return {"paid": amount}

    rt.providers["fake"] = FakeProvider({"refund": 120, "reason": "the parcel arrived damaged"})
    plan = make_plan(
        S("propose", "ai", ai=AiPlan(model="fake", prompt_template="Propose a refund"),
          validations=(ValidateRulePlan(check="output.refund <= 500", message="at most 500"),)),
        S("record", "action", action="t.record", args={"amount": "${{ steps.propose.output.refund }}"},
          requires_approval_if="output.amount > 100", gate=gate(quorum=2)),
        S("pay", "action", action="t.pay", args={"amount": "${{ steps.record.output.amount }}",
                                                  "to": "${{ input.customer }}"}),
        name="refund-flow")
    run_id = rt.submit(plan, {"customer": "c-42"}, initiator="user:alice", tenant="acme")
    assert rt.drive(run_id).state == "waiting"
    return run_id, paid


def test_a_reviewer_sees_the_proposal_its_checks_the_rule_the_next_step_and_the_quorum(client, rt, refund_run):
    run_id, _ = refund_run
    # Given bob approved already (one of two), and cy signed in
    rt.approve(run_id, "record", actor="user:bob", tenant="acme")
    sign_in(client, token(rt, "user:cy"))
    # When cy opens her approvals
    page = client.get("/ui/approvals").text
    section = page[page.index(f'id="gate-{run_id}-record@gate"'):]
    # Then she sees what the model proposed and why, and the checks its answer passed
    assert "<strong>propose</strong> (ai, answered by fake)" in section
    assert "<li>the parcel arrived damaged</li>" in section
    assert "<li>validate: output.refund &lt;= 500 (at most 500)</li>" in section
    # And the rule that asked, the step that runs once approved with its arguments, who approved and who must
    assert "<code>output.amount &gt; 100</code>, which held" in section
    assert re.search(r'Step <strong>pay</strong> \(action <code>t.pay</code>\)', section)
    assert "&#34;to&#34;: &#34;c-42&#34;" in section and "&#34;amount&#34;: 120" in section  # (rendered now)
    assert "filled in from what the run holds now" in section
    assert re.search(r'class="quorum">1 of 2: approved by user:bob[^;]*;\s*1 more from role:manager', section)
    assert re.search(r'class="time-left">1 h 0 min \(until ', section)  # (the gate's one hour, on a still clock)


def test_the_second_approval_from_a_plain_form_post_completes_the_run(client, rt, refund_run):
    run_id, paid = refund_run
    rt.approve(run_id, "record", actor="user:bob", tenant="acme")
    sign_in(client, token(rt, "user:cy"))
    page = client.get("/ui/approvals").text
    show_hash = re.search(r'name="payload_hash" value="([^"]+)"', page).group(1)
    # When cy approves with the form as the page makes it (no script)
    done = client.post(f"/ui/approvals/{run_id}/record@gate", follow_redirects=False,
                       data={"csrf_token": csrf_of(page), "decision": "approve", "payload_hash": show_hash})
    # Then the quorum is met and the run pays the refund the model proposed
    assert done.status_code == 303
    assert rt.drive(run_id).state == "completed" and paid == [(120, "c-42")]


def test_a_person_who_may_not_decide_the_gate_is_shown_no_proposal(client, rt, refund_run):
    run_id, _ = refund_run
    # Given alice, the run's initiator (who may not approve her own run), signed in
    sign_in(client, token(rt, "user:alice"))
    # When she opens the approvals page
    page = client.get("/ui/approvals").text
    # Then the gate and the model's answer are not on it
    assert run_id not in page and "the parcel arrived damaged" not in page
