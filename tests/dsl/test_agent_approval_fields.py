"""``agent.approval_required`` and ``agent.approval``: which tool calls wait for a person, and who decides."""

from __future__ import annotations

from dsl_helpers import check, codes

AGENT = """\
    permissions: [notes:write]
    approvals: {approvers: ["role:lead"], timeout: 2h}
    steps:
      - id: help
        permissions: [notes:write]
        agent:
          model: default
          goal: "help"
          tools: [notes.add, kb.search]
          max_steps: 5
"""


def test_given_approval_required_when_compiled_then_the_plan_names_the_tools_and_the_approvers():
    result = check(AGENT + """\
          approval_required: [notes.add]
          approval: {approvers: ["user:ben", "role:manager"], quorum: 2, timeout: 30m}
""")
    assert result.ok, [d.format() for d in result.diagnostics]
    agent = result.plan.step("help").agent
    assert agent.approval_required == ("notes.add",)
    assert agent.approval.approvers == ("user:ben", "role:manager") and agent.approval.quorum == 2
    assert agent.approval.timeout_ms == 30 * 60_000 and agent.approval.on_timeout == "reject"


def test_given_no_agent_approval_when_compiled_then_the_top_level_approvals_decide():
    result = check(AGENT + "          approval_required: [notes.add]\n")
    assert result.ok, [d.format() for d in result.diagnostics]
    approval = result.plan.step("help").agent.approval
    assert approval.approvers == ("role:lead",) and approval.timeout_ms == 2 * 3_600_000


def test_given_a_tool_not_in_tools_when_compiled_then_c401():
    result = check(AGENT + "          approval_required: [mail.send]\n")
    assert "C401" in codes(result)


def test_given_no_approvers_anywhere_when_approval_is_required_then_c418():
    result = check(AGENT.replace('    approvals: {approvers: ["role:lead"], timeout: 2h}\n', "")
                   + "          approval_required: [notes.add]\n")
    assert "C418" in codes(result)
