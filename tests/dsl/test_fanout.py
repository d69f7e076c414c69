"""Fan-out in the language: ``map`` and ``parallel`` through schema, compiler, plan, lint, diff and graph."""

from __future__ import annotations

import pytest
from dsl_helpers import check, codes

from sealflow.dsl import graph
from sealflow.dsl.diff import diff_plans
from sealflow.dsl.limits import MAP_ITEMS_MAX
from sealflow.dsl.model import ActionInfo
from sealflow.dsl.plan import Plan

MAP = """\
steps:
  - id: chunk
    set: {chunks: "['a', 'bb', 'ccc']"}
  - id: embed
    map:
      items: steps.chunk.output.chunks
      concurrency: __CONCURRENCY__
      max_items: __MAX__
      tolerate_failures: __TOLERATE__
      steps:
        - id: measure
          set: {size: "len(item)", at: "index"}
        - id: label
          set: {text: "str(steps.measure.output.size)"}
  - id: after
    set: {n: "len(steps.embed.output)"}
"""


def map_body(concurrency: int = 4, max_items: int = 100, tolerate: object = 0) -> str:
    return (MAP.replace("__CONCURRENCY__", str(concurrency)).replace("__MAX__", str(max_items))
            .replace("__TOLERATE__", repr(tolerate) if isinstance(tolerate, str) else str(tolerate)))


def plan_of(body: str) -> Plan:
    result = check(body)
    assert result.plan is not None, [d.format() for d in result.diagnostics]
    return result.plan


def test_given_a_map_when_compiled_then_the_plan_holds_its_bounds_and_a_nested_sub_flow():
    # Given a map with a percentage tolerance, when compiled
    plan = plan_of(map_body(tolerate="10%"))
    # Then the step is a map whose sub-flow is a nested plan with its own start, steps and edges
    embed = plan.step("embed")
    assert embed.kind == "map" and embed.map is not None
    assert (embed.map.items, embed.map.concurrency, embed.map.max_items) == ("steps.chunk.output.chunks", 4, 100)
    assert embed.map.start == "measure" and [s.id for s in embed.map.steps] == ["measure", "label"]
    assert embed.map.steps[0].next == "label" and embed.map.steps[1].next == "end"
    assert embed.map.tolerate_percent == 10 and embed.map.tolerated(25) == 2
    assert [p for p, _ in plan.all_steps()][:4] == [("steps", 0), ("steps", 1), ("steps", 1, "map", "steps", 0),
                                                    ("steps", 1, "map", "steps", 1)]
    # And the plan survives its JSON with its digest
    assert Plan.from_json(plan.to_json()).digest == plan.digest


def test_given_a_plan_without_fan_out_then_its_canonical_json_has_no_map_or_parallel_key():
    # Given a plan that does not fan out, then its digest covers the same JSON as before fan-out existed
    plan = plan_of("steps:\n  - id: a\n    set: {x: '1'}\n")
    assert b'"map"' not in plan.canonical_json() and b'"parallel"' not in plan.canonical_json()
    assert '"map"' not in plan.to_json()


def test_given_a_missing_bound_when_checked_then_the_schema_names_it_at_its_line():
    # Given a map without concurrency, when checked, then S201 points into the map
    body = map_body().replace("      concurrency: 4\n", "")
    result = check(body)
    found = [d for d in result.diagnostics if d.code == "S201"]
    assert found and "concurrency" in found[0].message and found[0].location.line == 10


@pytest.mark.parametrize("field, value", [("concurrency", 101), ("max_items", MAP_ITEMS_MAX + 1)])
def test_given_a_bound_over_its_hard_cap_when_checked_then_refused(field, value):
    body = map_body(**{"concurrency" if field == "concurrency" else "max_items": value})
    assert "S205" in codes(check(body))


def test_given_tolerate_failures_over_max_items_when_compiled_then_c408():
    assert "C408" in codes(check(map_body(max_items=5, tolerate=6)))


def test_given_fields_of_a_single_step_on_a_map_when_compiled_then_each_is_refused_at_its_key():
    # Given a map step carrying timeout and retry (which belong on its sub-flow's steps)
    body = map_body().replace("    map:\n", "    timeout: 5s\n    retry: {max_attempts: 2}\n    map:\n", 1)
    result = check(body)
    # Then each is a C418 naming the field
    messages = [d.message for d in result.diagnostics if d.code == "C418"]
    assert any("'timeout'" in m for m in messages) and any("'retry'" in m for m in messages)


def test_given_sub_flow_targets_when_compiled_then_they_name_the_sub_flows_own_steps():
    # Given a sub-step whose next names an outer step, then C401: a sub-flow jumps only within itself
    body = map_body().replace("          set: {size: \"len(item)\", at: \"index\"}\n",
                              "          set: {size: \"len(item)\", at: \"index\"}\n          next: after\n")
    assert "C401" in codes(check(body))


def test_given_a_sub_flow_reading_the_map_itself_when_checked_then_x304():
    body = map_body().replace('set: {text: "str(steps.measure.output.size)"}',
                              'set: {text: "str(steps.embed.output)"}')
    assert "X304" in codes(check(body))


def test_given_items_reading_item_when_checked_then_x310():
    body = map_body().replace("items: steps.chunk.output.chunks", "items: item")
    assert "X310" in codes(check(body))


PARALLEL = """\
steps:
  - id: start
    set: {x: "1"}
  - id: both
    parallel:
      branches:
        - steps: [{id: left, set: {v: "steps.start.output.x"}}]
        - steps: [{id: right, set: {v: "2"}}, {id: right_done, set: {v: "steps.right.output.v"}}]
  - id: after
    set: {n: "len(steps.both.output)"}
"""


def test_given_a_parallel_when_compiled_then_each_branch_is_a_sub_flow():
    plan = plan_of(PARALLEL)
    both = plan.step("both")
    assert both.parallel is not None
    assert [(b.start, [s.id for s in b.steps]) for b in both.parallel.branches] == [
        ("left", ["left"]), ("right", ["right", "right_done"])]


def test_given_one_branch_when_checked_then_refused():
    body = PARALLEL.replace("        - steps: [{id: right, set: {v: \"2\"}}, {id: right_done, set: "
                            "{v: \"steps.right.output.v\"}}]\n", "")
    assert "S205" in codes(check(body))


# ---------------------------------------------------------------- lint

ACTIONS = {"email.send": ActionInfo(name="email.send", permissions=("email:send",), effect="irreversible")}
SEND_EACH = """\
permissions: [email:send]
budget: {max_tokens: 1000}
steps:
  - id: draft
    ai: {model: default, prompt: {template: "List people"}}
  - id: each
    map:
      items: steps.draft.output.people
      concurrency: 2
      max_items: __MAX__
      steps:
        - id: send
          action: email.send
          permissions: [email:send]
          with: {to: "${{ item }}"}
          idempotency_key: "__KEY__"
"""


def lint(body: str) -> list[tuple[str, str, int]]:
    result = check(body, actions=ACTIONS, lint=True)
    return [(d.code, d.severity, d.location.line) for d in result.diagnostics]


def test_l508_given_an_irreversible_action_in_a_map_with_a_shared_key_then_an_error_at_the_key():
    found = lint(SEND_EACH.replace("__MAX__", "10").replace("__KEY__", "${{ run.id }}:send"))
    assert ("L508", "error", 20) in found


def test_l508_given_a_key_per_item_then_no_finding():
    found = lint(SEND_EACH.replace("__MAX__", "10").replace("__KEY__", "${{ run.id }}:send:${{ index }}"))
    assert not [f for f in found if f[0] == "L508"]


def test_l509_given_a_map_over_model_output_at_the_hard_cap_then_a_warning_and_below_it_none():
    key = "${{ run.id }}:send:${{ index }}"
    at_cap = lint(SEND_EACH.replace("__MAX__", str(MAP_ITEMS_MAX)).replace("__KEY__", key))
    assert ("L509", "warning", 14) in at_cap
    below = lint(SEND_EACH.replace("__MAX__", "50").replace("__KEY__", key))
    assert not [f for f in below if f[0] == "L509"]


# ---------------------------------------------------------------- diff

@pytest.mark.parametrize("old, new, code", [
    ({"concurrency": 2}, {"concurrency": 8}, "D631"),
    ({"max_items": 10}, {"max_items": 1000}, "D631"),
    ({"tolerate": 0}, {"tolerate": 3}, "D631"),
    ({"tolerate": "5%"}, {"tolerate": "20%"}, "D631"),
    ({"tolerate": 0}, {"tolerate": "5%"}, "D631"),
    ({"concurrency": 8}, {"concurrency": 2}, "D632"),
])
def test_given_a_map_widened_or_narrowed_when_diffed_then_review_or_info(old, new, code):
    # Given two versions of a map differing in one bound, when diffed, then the change is a finding at the map
    findings = diff_plans(plan_of(map_body(**old)), plan_of(map_body(**new)))
    assert [f.code for f in findings if f.code in ("D631", "D632")] == [code]
    assert all(f.step == "embed" for f in findings if f.code in ("D631", "D632"))


def test_given_a_new_irreversible_action_inside_a_map_when_diffed_then_it_needs_review():
    # Given a sub-flow that gains an irreversible action, when diffed, then D610 names the sub-step
    key = "${{ run.id }}:send:${{ index }}"
    old = check(SEND_EACH.replace("__MAX__", "10").replace("__KEY__", key).replace("action: email.send",
                                                                                    "action: email.draft"),
                actions={**ACTIONS, "email.draft": ActionInfo(name="email.draft", permissions=("email:send",))})
    new = check(SEND_EACH.replace("__MAX__", "10").replace("__KEY__", key), actions=ACTIONS)
    assert old.plan is not None and new.plan is not None
    found = [(f.code, f.step) for f in diff_plans(old.plan, new.plan)]
    assert ("D610", "send") in found


# ---------------------------------------------------------------- graph

def test_given_a_map_and_a_parallel_when_drawn_then_each_fans_out_into_a_box_and_joins():
    plan = plan_of(map_body())
    mermaid = graph.to_mermaid(plan)
    # Then the sub-flow is a subgraph, entered from the map node and left through its join node
    assert 'subgraph embed__0["each item of embed"]' in mermaid
    assert "embed -->|4 at once| measure" in mermaid and "label --> embed__join" in mermaid
    assert "embed__join --> after" in mermaid
    dot = graph.to_dot(plan_of(PARALLEL))
    assert 'subgraph "cluster_both@0"' in dot and 'subgraph "cluster_both@1"' in dot
    assert '"both" -> "right" [label="branch 2"]' in dot and '"right_done" -> "both@join"' in dot


# ---------------------------------------------------------------- the other lint rules see sub-flows

def test_l501_given_model_output_into_an_irreversible_action_inside_a_map_then_warned_unless_gated():
    # Given an unchecked model output that feeds an irreversible action inside a map
    body = SEND_EACH.replace("__MAX__", "10").replace("__KEY__", "${{ run.id }}:send:${{ index }}").replace(
        'with: {to: "${{ item }}"}', 'with: {to: "${{ item }}", body: "${{ steps.draft.output.text }}"}')
    assert ("L501", "warning", 19) in lint(body)
    # When an approval step runs first in the sub-flow, then there is no warning
    gated = body.replace("      steps:\n        - id: send\n",
                         "      steps:\n        - id: ok\n          approval: {approvers: [role:boss]}\n"
                         "        - id: send\n")
    assert not [f for f in lint(gated) if f[0] == "L501"]


def test_l503_and_l505_given_permissions_and_agents_inside_a_sub_flow_then_they_count():
    # Given the only user of a permission and an agent without max_tool_calls, both inside a parallel
    body = """\
permissions: [email:send]
budget: {max_tokens: 1000}
steps:
  - id: both
    parallel:
      branches:
        - steps: [{id: mail, action: email.send, permissions: [email:send], idempotency_key: k}]
        - steps: [{id: think, agent: {model: default, goal: "decide", max_steps: 3}}]
"""
    found = lint(body)
    # Then the permission is used (no L503) and the agent is found at its own line (L505)
    assert not [f for f in found if f[0] == "L503"]
    assert ("L505", "warning", 12) in found


def test_given_a_silence_on_a_sub_step_or_on_the_map_then_the_finding_inside_is_info_with_the_reason():
    base = SEND_EACH.replace("__MAX__", "10").replace("__KEY__", "${{ run.id }}:send")
    on_sub = base.replace("          permissions: [email:send]\n", "          permissions: [email:send]\n"
                          "          lint: {ignore: [L508], reason: the provider deduplicates by key}\n")
    on_map = base.replace("    map:\n", "    lint: {ignore: [L508], reason: the provider deduplicates}\n    map:\n")
    for body in (on_sub, on_map):
        assert [f[:2] for f in lint(body) if f[0] == "L508"] == [("L508", "info")]


def test_d630_given_an_effect_inside_a_map_moved_ahead_of_its_approval_when_diffed_then_review():
    # Given a sub-flow whose irreversible send was behind an approval step, and a new version sending first
    key = "${{ run.id }}:send:${{ index }}"
    gate = "        - id: ok\n          approval: {approvers: [role:boss]}\n"
    base = SEND_EACH.replace("__MAX__", "10").replace("__KEY__", key)
    old = check(base.replace("      steps:\n        - id: send\n", "      steps:\n" + gate + "        - id: send\n"),
                actions=ACTIONS)
    new = check(base + gate, actions=ACTIONS)
    assert old.plan is not None and new.plan is not None, [d.format() for d in new.diagnostics]
    # When diffed, then the send reached without the approval is a review finding at the sub-step
    found = [(f.code, f.step) for f in diff_plans(old.plan, new.plan)]
    assert ("D630", "send") in found
