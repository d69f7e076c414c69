"""The front end's flow checks in linear time and memory, with the answers they always gave.

The control-flow questions (which steps can have run before a step; which paths pass no gate) are answered by
:class:`sealflow.dsl.graph.Reachability` instead of a set of ancestors per step. Each test compares the new
answers with the old way of computing them (kept here as the oracle) or with the diagnostics a definition always
got; none measures time (the benchmark does: ``python -m tools.benchmarks.compile``).
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

from dsl_helpers import HEADER, check, codes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sealflow.dsl import graph, lint
from sealflow.dsl.api import check_bytes, check_file
from sealflow.dsl.compiler import FlowIds
from sealflow.dsl.expressions.expression import check as check_expression
from sealflow.dsl.expressions.expression import parse
from sealflow.dsl.expressions.static_check import _Known, _RanBefore
from sealflow.dsl.model import ActionInfo
from sealflow.dsl.plan import END
from tools.benchmarks.compile import chain_definition

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- oracles: the former, quadratic computations

def ancestors_oracle(adj: dict[str, list[str]]) -> dict[str, set[str]]:
    """For each node, the nodes with a path to it (itself only on a cycle): the former ``graph.ancestors``."""
    reverse: dict[str, set[str]] = {}
    for src, targets in adj.items():
        for dst in targets:
            reverse.setdefault(dst, set()).add(src)
    nodes = set(adj) | {t for ts in adj.values() for t in ts}
    result = {}
    for node in nodes:
        seen: set[str] = set()
        queue = deque(reverse.get(node, ()))
        while queue:
            cur = queue.popleft()
            if cur not in seen:
                seen.add(cur)
                queue.extend(reverse.get(cur, ()))
        result[node] = seen
    return result


def open_path_oracle(adj: dict[str, list[str]], gates: set[str], src: str, dst: str) -> bool:
    """The former ``lint._open_path``: an adjacency without the gates (but ``dst``) built per question."""
    blocked = {g for g in gates if g != dst}
    if src in blocked:
        return False
    open_adj = {k: [t for t in v if t not in blocked] for k, v in adj.items() if k not in blocked}
    open_adj[src] = [t for t in adj.get(src, []) if t not in blocked]
    return dst in graph.reachable(open_adj, src)


@st.composite
def graphs(draw) -> dict[str, list[str]]:
    """A control flow: up to 14 steps, each with up to 4 edges to any step (itself too) or to the end."""
    n = draw(st.integers(1, 14))
    nodes = [f"s{i}" for i in range(n)]
    targets = st.sampled_from(nodes + [END])
    return {node: draw(st.lists(targets, max_size=4)) for node in nodes}


def flows_of(plan) -> list[tuple]:
    """The plan's flows: its top level, then each fan-out step's sub-flows."""
    found = [plan.steps]
    for s in plan.steps:
        found.extend(sub for _, sub, _ in s.subflows())
    return found


# ---------------------------------------------------------------- graph.Reachability

@SETTINGS
@given(graphs(), st.randoms(use_true_random=False))
def test_given_any_control_flow_when_asked_in_any_order_then_reachability_answers_as_the_ancestor_sets(adj, rnd):
    # Given a random control flow (cycles, self-loops, edges to the end, unreachable steps) and its ancestor sets
    expected = ancestors_oracle(adj)
    nodes = sorted(set(adj) | {END}) + ["unknown"]
    pairs = [(x, y) for x in nodes for y in nodes]
    rnd.shuffle(pairs)  # the memoised searches must not depend on the order of the questions
    reach = graph.Reachability(adj)
    # When every pair is asked
    answers = {(x, y): reach.reaches(x, y) for x, y in pairs}
    # Then each answer is "x is an ancestor of y", as the sets said
    assert answers == {(x, y): x in expected.get(y, set()) for x, y in pairs}


LOOPS_SWITCHES_ERRORS = """\
budget: {max_steps: 50}
steps:
  - id: fetch
    action: crm.get
    on_error: [{errors: [network], next: recover}]
  - id: route
    switch:
      - {when: "steps.fetch.output == 1", next: left}
      - {when: "steps.fetch.output == 2", next: right}
      - {next: done}
  - id: left
    action: crm.left
    next: join
  - id: right
    action: crm.right
    on_error: [{errors: [timeout], next: route}]
  - id: join
    switch:
      - {when: "steps.fetch.output == 3", next: fetch}
      - {next: fan}
  - id: recover
    action: crm.recover
    next: fan
  - id: fan
    map:
      items: "steps.fetch.output"
      concurrency: 2
      max_items: 10
      steps:
        - {id: one, action: crm.one, on_error: [{errors: [network], next: three}]}
        - id: two
          switch:
            - {when: "item == 1", next: one}
            - {next: end}
        - {id: three, action: crm.three}
  - id: both
    parallel:
      branches:
        - steps: [{id: b1, action: crm.b1}, {id: b2, action: crm.b2, next: b1}]
        - steps: [{id: c1, action: crm.c1}]
  - id: done
    succeed: {}
"""


def test_given_plans_with_loops_switches_on_error_and_fan_outs_when_asked_then_every_flow_answers_as_before():
    # Given compiled plans: the shipped definitions and one with loops, switches, on_error routes and fan-outs
    plans = [check(LOOPS_SWITCHES_ERRORS).plan]
    plans += [check_file(p).plan for p in sorted((ROOT / "definitions").glob("*.yaml"))]
    assert all(plan is not None for plan in plans)
    for plan in plans:
        for flow in flows_of(plan):
            adj = graph.adjacency_of(flow)
            expected = ancestors_oracle(adj)
            reach = graph.Reachability(adj)
            nodes = list(adj) + [END]
            # When each step is asked about every step of its flow
            # Then the answers are the ancestor sets the flow check used to build
            for y in nodes:
                assert {x for x in nodes if reach.reaches(x, y)} == expected.get(y, set()), (plan.name, y)


def test_given_longer_chains_when_indexed_and_asked_then_the_index_grows_linearly():
    # Given chains of 1,000 and 4,000 steps, each step asked about the one before it and about the first
    def size(n: int) -> int:
        adj = {f"s{i}": [f"s{i + 1}"] for i in range(n - 1)} | {f"s{n - 1}": [END]}
        reach = graph.Reachability(adj)
        assert all(reach.reaches(f"s{i - 1}", f"s{i}") and reach.reaches("s0", f"s{i}") for i in range(1, n))
        return reach.size()

    # When the index's entries are counted
    small, large = size(1000), size(4000)
    # Then four times the steps hold four times the entries (a set of ancestors per step would hold sixteen)
    assert large <= 4 * small + 8


def test_given_a_wide_switch_when_every_branch_is_asked_about_the_join_then_linear_and_correct():
    # Given a switch to 2,000 branches that all meet at one join (the branches are cross edges of the search)
    n = 2000
    adj = {"sw": [f"b{i}" for i in range(n)]} | {f"b{i}": ["join"] for i in range(n)} | {"join": [END]}
    reach = graph.Reachability(adj)
    # When each branch is asked whether it can have run before the join, and before another branch
    # Then each can run before the join, none before a sibling, and the index stays linear in the graph
    assert all(reach.reaches(f"b{i}", "join") and reach.reaches(f"b{i}", END) for i in range(n))
    assert not any(reach.reaches(f"b{i}", f"b{(i + 1) % n}") for i in range(n))
    assert reach.size() <= 4 * (len(adj) + 2 * n + 2)


# ---------------------------------------------------------------- static_check: _RanBefore, _Known, check

def test_given_a_flow_when_ran_before_is_asked_then_it_holds_the_ancestors_self_when_asked_and_the_outer_steps():
    # Given a flow a -> b -> c with a loop c -> b, and steps that ran before the flow started
    adj = {"a": ["b"], "b": ["c"], "c": ["b", END]}
    reach = graph.Reachability(adj)
    outer = frozenset({"before"})
    # When the views of each step are asked
    ran_b = _RanBefore(reach, "b", outer)
    ran_a = _RanBefore(reach, "a", outer)
    # Then they hold the ancestors (b itself, on the loop), the outer steps, and a only with include_self
    assert {x for x in ["a", "b", "c", "before", "other", END] if x in ran_b} == {"a", "b", "c", "before"}
    assert {x for x in ["a", "b", "c", "before"] if x in ran_a} == {"before"}
    assert "a" in ran_a.including_self() and "a" not in ran_a
    assert 1 not in ran_b  # not a step id: refused before the index, which would raise a TypeError on it


def test_given_a_sub_flow_when_known_is_asked_then_it_holds_the_outer_and_own_ids_without_copying_them():
    # Given the top level's ids and a sub-flow's own
    top = _Known(frozenset({"fetch", "fan", "done"}))
    sub = _Known(frozenset({"inner", "fetch"}), top)
    # When asked, listed and counted
    # Then the view behaves as the union did (each id once), and holds the top level's set itself
    assert "inner" in sub and "done" in sub and "nope" not in sub and "inner" not in top
    assert sorted(sub) == ["done", "fan", "fetch", "inner"] and len(sub) == 4
    assert sub._outer is top


def test_given_views_instead_of_sets_when_an_expression_is_checked_then_the_same_problems():
    # Given the sets the check used to get, and views holding the same ids
    known = {"fetch", "classify", "record"}
    ran = {"fetch", "classify"}
    reach = graph.Reachability({"fetch": ["classify"], "classify": ["record"], "record": [END]})
    known_view = _Known(frozenset(known))
    ran_view = _RanBefore(reach, "record", frozenset())
    for text in ["steps.fetch.output and steps.record.status", "steps.fetchh.output", "steps.record.nope",
                 "steps['classify'].output + len(steps.record.output)"]:
        # When each expression is checked both ways
        with_sets = check_expression(parse(text), known_steps=known, ran_before=ran, allow_output=False)
        with_views = check_expression(parse(text), known_steps=known_view, ran_before=ran_view, allow_output=False)
        # Then the problems are the same: codes, offsets, messages and hints
        assert [(e.code, e.offset, e.message, e.hint) for e in with_views] == \
            [(e.code, e.offset, e.message, e.hint) for e in with_sets]


def _x304(body: str) -> list[tuple[int, int]]:
    """(line, column) of each X304 of ``body``, lines counted in the body (the header's excluded)."""
    result = check(body)
    assert "C404" not in codes(result), [d.format() for d in result.diagnostics]
    header = HEADER.count("\n")
    return sorted((d.location.line - header, d.location.column) for d in result.diagnostics if d.code == "X304")


def _at(body: str, needle: str) -> tuple[int, int]:
    """(line, column) of ``needle``'s first character in ``body``, both from 1."""
    before = body[:body.index(needle)]
    return before.count("\n") + 1, len(before) - before.rfind("\n")


def test_given_loops_and_switches_when_checked_then_x304_only_where_the_step_cannot_have_run():
    # Given a loop (join back to fetch through a switch), two switch branches, and a step reading the sibling
    # branch, the join after it, and a step the loop never leads back from
    reads = ('    with: {a: "${{ steps.right.output }}", b: "${{ steps.join.output }}", '
             'c: "${{ steps.recover.output }}"}\n')
    body = LOOPS_SWITCHES_ERRORS.replace("action: crm.left\n", "action: crm.left\n" + reads)
    # When checked
    # Then left may read right and join (the loop brings the run back to left after them), not recover
    assert _x304(body) == [_at(body, "recover.output")]


def test_given_on_error_routes_when_checked_then_the_handler_reads_the_failed_step_but_not_the_reverse():
    # Given a step whose errors go to a handler, the handler reading it, and the step reading the handler
    body = """\
steps:
  - id: call
    action: crm.call
    with: {h: "${{ steps.handler.output }}"}
    on_error: [{errors: [network], next: handler}]
  - {id: ok, succeed: {}}
  - id: handler
    action: crm.fix
    with: {c: "${{ steps.call.status }}"}
"""
    # When checked
    # Then only the step reading its handler is refused (the handler runs after it, never before)
    assert _x304(body) == [_at(body, "handler.output")]


def test_given_fan_out_sub_flows_when_checked_then_inner_steps_read_the_outer_steps_before_and_their_own_flow():
    # Given a map whose sub-flow reads a step before the map, one after it, an inner step before and one after,
    # and a parallel whose branch reads a step of its own branch
    body = """\
steps:
  - {id: first, action: crm.first}
  - id: fan
    map:
      items: "steps.first.output"
      concurrency: 2
      max_items: 10
      steps:
        - {id: one, action: crm.one, with: {a: "${{ steps.first.output }}", b: "${{ steps.two.output }}"}}
        - {id: two, action: crm.two, with: {a: "${{ steps.one.output }}", b: "${{ steps.last.output }}"}}
  - id: both
    parallel:
      branches:
        - steps: [{id: b1, action: crm.b1}, {id: b2, action: crm.b2, with: {a: "${{ steps.b1.output }}"}}]
        - steps: [{id: c1, action: crm.c1, with: {a: "${{ steps.fan.output }}"}}]
  - {id: last, action: crm.last, with: {a: "${{ steps.fan.output }}"}}
"""
    # When checked
    # Then only a later step of the same sub-flow ('one' reading 'two') and a step after the map are refused
    assert _x304(body) == [_at(body, "two.output"), _at(body, "last.output")]
    assert "X310" not in codes(check(body))


def test_given_validate_on_a_step_when_checked_then_it_reads_its_own_output_as_before():
    # Given a validate rule reading the step's own output through steps.<id> (a site that includes the step)
    body = """\
steps:
  - id: one
    action: crm.one
    validate: ["steps.one.output != null"]
    with: {a: "${{ steps.one.output }}"}
"""
    # When checked
    # Then the rule may read it; the step's own arguments may not (it has not run yet)
    assert _x304(body) == [_at(body, "one.output }}")]


# ---------------------------------------------------------------- compiler.FlowIds

def test_given_flow_ids_when_used_as_the_list_was_then_order_indexing_and_membership_agree():
    # Given a flow's ids in order
    ids = FlowIds(["a", "b", "c"])
    # When indexed, sliced, listed, counted and asked
    # Then it answers as the list did
    assert ids[0] == "a" and ids[-1] == "c" and list(ids[1:]) == ["b", "c"]
    assert list(ids) == ["a", "b", "c"] and len(ids) == 3
    assert "b" in ids and "end" not in ids and "z" not in ids


def test_given_an_unknown_target_when_compiled_then_c401_with_the_same_did_you_mean():
    # Given a next: with a misspelled step id
    body = """\
steps:
  - {id: fetch, action: crm.get, next: recrod}
  - {id: record, action: crm.put}
"""
    # When checked
    [diag] = [d for d in check(body).diagnostics if d.code == "C401"]
    # Then the error names the target and suggests the step it misspells
    assert diag.message == "unknown step 'recrod'" and diag.hint == "did you mean 'record'?"


# ---------------------------------------------------------------- lint: _open_paths, _open_path, _silenced

@SETTINGS
@given(graphs(), st.data())
def test_given_any_flow_and_gates_when_open_paths_asked_then_the_same_answers_as_the_per_question_adjacency(adj,
                                                                                                         data):
    # Given a random control flow and some of its steps as gates
    nodes = sorted(adj)
    gates = set(data.draw(st.lists(st.sampled_from(nodes), max_size=4)))
    paths = lint._open_paths(adj, gates)
    # When every pair is asked whether a path passes no gate but the destination
    # Then the answers are those of an adjacency rebuilt without the gates for each question
    for src in nodes:
        for dst in nodes + [END]:
            assert lint._open_path(paths, src, dst) == open_path_oracle(adj, gates, src, dst), (src, dst)


L501_INTO_SUB_FLOW = """\
permissions: [email:send]
budget: {max_tokens: 1000}
steps:
  - id: draft
    ai: {model: default, prompt: {template: "Write"}}
__BETWEEN__  - id: each
    map:
      items: "[1, 2]"
      concurrency: 1
      max_items: 2
      steps:
__INNER__        - id: send
          action: email.send
          permissions: [email:send]
          with: {body: "${{ steps.draft.output }}"}
          idempotency_key: "${{ run.id }}-${{ index }}"
"""


def test_given_model_output_into_a_sub_flow_when_linted_then_l501_unless_a_gate_is_on_the_way():
    actions = {"email.send": ActionInfo(name="email.send", permissions=("email:send",), effect="irreversible")}
    gate = "  - id: ok\n    approval: {approvers: [role:editor], timeout: 1h}\n"
    inner_gate = "        - id: ok\n          approval: {approvers: [role:editor], timeout: 1h}\n"

    def l501(between: str, inner: str) -> int:
        body = L501_INTO_SUB_FLOW.replace("__BETWEEN__", between).replace("__INNER__", inner)
        result = check(body, actions=actions, lint=True)
        assert result.plan is not None, [d.format() for d in result.diagnostics]
        return codes(result).count("L501")

    # Given model output read inside a map, with no gate, a gate before the map, or a gate inside the sub-flow
    # When linted
    # Then it is warned about only without a gate on the way
    assert (l501("", ""), l501(gate, ""), l501("", inner_gate)) == (1, 0, 0)


def test_given_silences_at_several_depths_when_a_finding_is_placed_then_the_innermost_reason_wins():
    # Given a fan-out step silencing L501 and L505, and its sub-step silencing L501 with its own reason
    ignores = {("steps", 2): ({"L501", "L505"}, "outer reason"),
               ("steps", 2, "map", "steps", 0): ({"L501"}, "inner reason"),
               ("steps", 3): ({"L501"}, "")}
    # When findings inside, beside and outside are placed
    # Then the innermost step that silences the code gives the reason; an empty reason silences nothing
    assert lint._silenced(ignores, "L501", ("steps", 2, "map", "steps", 0, "with", "x", 3)) == "inner reason"
    assert lint._silenced(ignores, "L505", ("steps", 2, "map", "steps", 0, "agent")) == "outer reason"
    assert lint._silenced(ignores, "L501", ("steps", 2, "map", "items")) == "outer reason"
    assert lint._silenced(ignores, "L501", ("steps", 3, "with")) is None
    assert lint._silenced(ignores, "L502", ("steps", 2)) is None
    assert lint._silenced(ignores, "L501", ("steps", 20)) is None


# ---------------------------------------------------------------- the benchmark's generated definitions

def test_given_the_benchmarks_generated_chain_when_checked_then_valid_and_each_step_reads_the_one_before():
    # Given the chain the compile benchmark validates at 1k and 10k steps, here at 50
    text = chain_definition(50)
    # When checked
    result = check_bytes(text.encode(), "chain.yaml")
    # Then it compiles with no diagnostic, 50 steps, each after the first reading its predecessor's output
    assert result.plan is not None and result.diagnostics == []
    assert [s.id for s in result.plan.steps] == [f"s{i}" for i in range(50)]
    assert all(f"steps.s{i - 1}.output" in s.args["x"] for i, s in enumerate(result.plan.steps) if i)
