"""Lint: rules about safety that a valid definition can still get wrong.

Each rule is a generator over a compiled definition that yields findings; the
registry :data:`RULES` holds its code, severity, title and rationale (the
rationale is printed by ``sealflow lint --explain CODE`` and listed in
``docs/lint.md``). A step silences a rule with ``lint: {ignore: [CODE], reason: ...}``;
a silenced finding is still reported, as ``info``, with the reason, never silently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sealflow.dsl import graph
from sealflow.dsl.codes import CODES
from sealflow.dsl.compile_fanout import all_model_steps
from sealflow.dsl.document import Pointer
from sealflow.dsl.durations import MINUTE
from sealflow.dsl.errors import Diagnostic, Location, Severity
from sealflow.dsl.expressions import ExpressionError, compile_cached
from sealflow.dsl.expressions.templates import parse_template
from sealflow.dsl.kinds import traits_of
from sealflow.dsl.loader import Document
from sealflow.dsl.model import ActionInfo, Definition
from sealflow.dsl.plan import Plan

Finding = tuple[str, Pointer, str, str | None]  # (code, pointer, message, hint)


@dataclasses.dataclass(frozen=True)
class Rule:
    code: str
    title: str
    rationale: str
    check: Callable[[Context], Iterator[Finding]]


@dataclasses.dataclass
class Context:
    doc: Document
    d: Definition
    plan: Plan
    actions: dict[str, ActionInfo] | None

    def effect(self, action: str | None) -> str | None:
        if not action:
            return None
        if self.actions and action in self.actions:
            return self.actions[action].effect
        meta = self.plan.actions.get(action)
        return meta.effect if meta else None


def _step_refs(text_values: Iterable[tuple[Pointer, str]],
               kind: str = "template") -> Iterator[tuple[str, int, Pointer]]:
    """(step id, offset, pointer) for each ``steps.<id>`` reference in the given (pointer, text) pairs."""
    for pointer, text in text_values:
        try:
            parts = [(compile_cached(text), 0)] if kind == "expr" else parse_template(text).expressions()
        except ExpressionError:
            continue
        for expr, base in parts:
            for ref in expr.references():
                if ref.root == "steps" and ref.step:
                    yield ref.step, base + ref.offset, pointer


def _strings(value: Any, pointer: Pointer) -> Iterator[tuple[Pointer, str]]:
    if isinstance(value, str):
        yield pointer, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, pointer + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, pointer + (i,))


def _gates(ctx: Context) -> set[str]:
    return {s.id for _, s in ctx.plan.all_steps() if s.kind == "approval" or s.requires_approval_if}


def _open_paths(adj: dict[str, list[str]], gates: set[str]) -> graph.Reachability:
    """The paths of one flow that pass no gate: a gate's own edges are cut, so a path may end at a gate but not go
    through one. Built once per flow; :func:`_open_path` asks it about each pair."""
    return graph.Reachability({k: [] if k in gates else v for k, v in adj.items()})


def _open_path(open_paths: graph.Reachability, src: str, dst: str) -> bool:
    """Whether ``dst`` is reachable from ``src`` without passing a gate other than ``dst`` itself."""
    return src == dst or open_paths.reaches(src, dst)


def check_unchecked_model_output(ctx: Context) -> Iterator[Finding]:
    gates = _gates(ctx)
    outer = _open_paths(graph.adjacency(ctx.plan), gates)
    # each step's flow: its fan-out step (None at the top level), the flow's gate-free paths and start
    flows: dict[str, tuple[str | None, graph.Reachability, str]] = {s.id: (None, outer, ctx.plan.start)
                                                                    for s in ctx.plan.steps}
    for fan in ctx.plan.steps:
        for _, sub, start in fan.subflows():
            inner = _open_paths(graph.adjacency_of(sub), gates)
            flows.update({x.id: (fan.id, inner, start) for x in sub})
    # taint: ai/agent output not checked by validate or a gate on the step itself, propagated through set steps
    tainted = {ps.id for _, ps in ctx.plan.all_steps() if traits_of(ps.kind).calls_model and not ps.validations
               and not ps.requires_approval_if}
    every = all_model_steps(ctx.d.steps)
    for _, s in every:
        if s.set and any(ref in tainted for ref, _, _ in _step_refs(_strings(s.set, ()), "expr")):
            tainted.add(s.id)
    for p, s in every:
        if ctx.effect(s.action) != "irreversible":
            continue
        owner, paths, start = flows[s.id]
        for src, offset, pointer in _step_refs(_strings(s.with_, p + ("with",))):
            if src not in tainted or src not in flows:
                continue
            if flows[src][0] == owner:  # the same flow
                reached = _open_path(paths, src, s.id)
            else:  # an outer step into a sub-flow: to the fan-out step, then from the sub-flow's start
                reached = owner is not None and _open_path(outer, src, owner) and _open_path(paths, start, s.id)
            if reached:
                yield ("L501", pointer + (offset,),
                       f"output of model step {src!r} flows into irreversible action {s.action!r} of step "
                       f"{s.id!r} with no validate, approval or requires_approval_if in between",
                       f"add 'validate:' rules to {src!r}, or an approval step before {s.id!r}")


def check_approval_timeout(ctx: Context) -> Iterator[Finding]:
    for p, s in all_model_steps(ctx.d.steps):
        if s.approval is not None and s.approval.on_timeout != "reject":
            yield ("L502", p + ("approval", "on_timeout"),
                   f"approval {s.id!r} routes to {s.approval.on_timeout.next!r} on timeout instead of rejecting",
                   "use on_timeout: reject so an unanswered approval fails closed")


def check_unused_permissions(ctx: Context) -> Iterator[Finding]:
    used = {p for _, s in ctx.plan.all_steps() for p in s.permissions}
    for meta in ctx.plan.actions.values():
        used.update(meta.permissions)
    for _, call in ctx.plan.called():  # a called workflow's permissions are its caller's to declare (C429)
        used.update(call.plan.permissions)
    for j, perm in enumerate(ctx.d.permissions):
        if perm not in used:
            yield ("L503", ("permissions", j), f"permission {perm!r} is declared but no step uses it",
                   "remove it: a workflow should ask for no more than it needs")


def check_model_budget(ctx: Context) -> Iterator[Finding]:
    model_steps = [s for _, s in ctx.plan.all_steps() if traits_of(s.kind).calls_model]
    b = ctx.plan.budget
    if model_steps and b.max_tokens is None and b.max_cost_usd is None:
        names = ", ".join(s.id for s in model_steps)
        yield ("L504", ("budget",) if "budget" in ctx.doc.data else ("name",),
               f"the workflow calls models ({names}) but sets no budget.max_tokens or budget.max_cost_usd",
               "add budget: {max_tokens: N} or {max_cost_usd: X}")


def check_agent_tool_calls(ctx: Context) -> Iterator[Finding]:
    for p, s in all_model_steps(ctx.d.steps):
        if s.agent is not None and s.agent.max_tool_calls is None and not (s.budget and s.budget.max_tool_calls):
            yield ("L505", p + ("agent",), f"agent step {s.id!r} has no max_tool_calls",
                   "set agent.max_tool_calls to bound what the model may do")


def check_lock_across_wait(ctx: Context) -> Iterator[Finding]:
    for p, s in ctx.plan.all_steps():
        if not s.lock:
            continue
        why = None
        if s.kind == "approval" or s.requires_approval_if:
            why = "an approval"
        elif s.kind == "wait" and s.wait is not None and (s.wait.until is not None or (s.wait.for_ms or 0) >= MINUTE):
            why = "a long wait"
        if why:
            yield ("L506", p + ("lock",), f"step {s.id!r} holds lock {s.lock!r} across {why}",
                   "take the lock in the step after the approval or wait, not around it")


def _uses_item(text: str) -> bool:
    try:
        parts = parse_template(text).expressions()
    except ExpressionError:
        return False
    return any(ref.root in ("item", "index") for expr, _ in parts for ref in expr.references())


def check_map_idempotency(ctx: Context) -> Iterator[Finding]:
    for p, s in all_model_steps(ctx.d.steps):
        if s.map is None:
            continue
        for q, sub in all_model_steps(s.map.steps, p + ("map",)):
            if ctx.effect(sub.action) != "irreversible":
                continue
            if sub.idempotency_key is None or not _uses_item(sub.idempotency_key):
                at = q + ("idempotency_key",) if sub.idempotency_key is not None else q + ("action",)
                yield ("L508", at, f"irreversible action {sub.action!r} of step {sub.id!r} runs once per item of map "
                       f"{s.id!r}, but its idempotency_key does not use index or item: every item would share one "
                       "key, so the first item's effect would be replayed for all the others",
                       'make the key per item: "${{ run.id }}:' + sub.id + ':${{ index }}"')


def check_map_over_model_output(ctx: Context) -> Iterator[Finding]:
    from sealflow.dsl.limits import MAP_ITEMS_MAX

    models = {s.id for _, s in ctx.plan.all_steps() if traits_of(s.kind).calls_model}
    for p, s in all_model_steps(ctx.d.steps):
        if s.map is None or s.map.max_items < MAP_ITEMS_MAX:
            continue
        sources = sorted({ref for ref, _, _ in _step_refs([(p, s.map.items)], "expr") if ref in models})
        if sources:
            yield ("L509", p + ("map", "max_items"), f"map {s.id!r} runs over the output of model step "
                   f"{sources[0]!r} with max_items at the hard cap ({MAP_ITEMS_MAX}): the model decides how many "
                   "items run, each with its own calls and costs",
                   "set max_items to the most items the workflow should ever fan out to")


RULES: dict[str, Rule] = {
    r.code: r
    for r in (
        Rule("L501", CODES["L501"][1],
             "A model's output is a proposal, not a decision. Passing it unchecked into an action that cannot be "
             "undone lets a prompt injection or a hallucination act on the world. Check it with validate rules, "
             "or put a human approval between them.", check_unchecked_model_output),
        Rule("L502", CODES["L502"][1],
             "An approval nobody answered is not an approval. Routing elsewhere on timeout usually lets the run "
             "continue without the human decision the gate was there for; fail closed instead.",
             check_approval_timeout),
        Rule("L503", CODES["L503"][1],
             "Least privilege: every declared permission is checked at submission and widens what the run may do. "
             "An unused one is a grant nobody reviews.", check_unused_permissions),
        Rule("L504", CODES["L504"][1],
             "Model calls cost money and can loop. Without a token or cost budget a runaway run spends without "
             "limit.", check_model_budget),
        Rule("L505", CODES["L505"][1],
             "An agent chooses its own tool calls; without max_tool_calls a confused or manipulated model can call "
             "tools many times within its step budget.", check_agent_tool_calls),
        Rule("L506", CODES["L506"][1],
             "A lock held while a human decides or a timer runs blocks every other run on that resource for hours, "
             "and a lease that outlives its holder invites a fencing failure.", check_lock_across_wait),
        Rule("L508", CODES["L508"][1],
             "A map runs its sub-flow once per item. An irreversible action there with a key shared by every item "
             "runs once for the first item and replays that result for all the others (or, without a key, repeats "
             "on redelivery); a key built from index or item makes each item's effect happen exactly once.",
             check_map_idempotency),
        Rule("L509", CODES["L509"][1],
             "A list produced by a model is as long as the model says. With max_items at the language's hard cap, "
             "a confused or manipulated model can fan out thousands of items, each with its own calls and costs; "
             "bound it by what the workflow needs.", check_map_over_model_output),
    )
}


def _ignores(ctx: Context) -> tuple[dict[Pointer, tuple[set[str], str]], list[Diagnostic]]:
    """Step pointer -> (silenced codes, reason); a fan-out step's silences cover its sub-flows too."""
    result, problems = {}, []
    for p, s in all_model_steps(ctx.d.steps):
        if s.lint is None:
            continue
        if not (s.lint.reason or "").strip():
            problems.append(Diagnostic("L500", f"step {s.id!r} silences {', '.join(s.lint.ignore)} without a reason",
                                       ctx.doc.locate(p + ("lint",), key=True),
                                       hint="add lint.reason saying why the rule does not apply here"))
        for j, code in enumerate(s.lint.ignore):
            if code not in RULES:
                problems.append(Diagnostic("L500", f"step {s.id!r} silences unknown rule {code!r}",
                                           ctx.doc.locate(p + ("lint", "ignore", j)),
                                           hint="known rules: " + ", ".join(RULES)))
        result[p] = (set(s.lint.ignore), (s.lint.reason or "").strip())
    return result, problems


def _silenced(ignores: dict[Pointer, tuple[set[str], str]], code: str, pointer: Pointer) -> str | None:
    """The reason of the innermost step around ``pointer`` that silences ``code`` (None: not silenced): the
    pointer's prefixes are looked up, longest first, rather than every silencing step scanned per finding."""
    for length in range(len(pointer), -1, -1):
        found = ignores.get(pointer[:length])
        if found is not None and code in found[0] and found[1]:
            return found[1]
    return None


def lint(doc: Document, definition: Definition, plan: Plan, *, actions: dict[str, ActionInfo] | None = None,
         only: set[str] | None = None) -> list[Diagnostic]:
    ctx = Context(doc, definition, plan, actions)
    ignores, out = _ignores(ctx)
    for rule in RULES.values():
        if only and rule.code not in only:
            continue
        for code, pointer, message, hint in rule.check(ctx):
            location = _locate(doc, pointer)
            reason = _silenced(ignores, code, pointer)
            if reason is not None:
                out.append(Diagnostic(code, f"{message} [silenced: {reason}]", location, severity="info"))
            else:
                out.append(Diagnostic(code, message, location, severity=_SEVERITIES[CODES[code][0]], hint=hint,
                                      pointer="/".join(map(str, pointer))))
    if actions is None and any(s.action or s.agent for _, s in all_model_steps(definition.steps)):
        out.append(Diagnostic("L507", "action metadata not loaded: effects and permissions of actions were not "
                              "checked", doc.locate(("steps",), key=True), severity="info",
                              hint="pass --actions MODULE_OR_FILE to check irreversible actions and permissions"))
    return out


#: the severities of lint codes (CODES also holds the diff's "review")
_SEVERITIES: dict[str, Severity] = {"error": "error", "warning": "warning", "info": "info"}


def _locate(doc: Document, pointer: Pointer) -> Location:
    if pointer and isinstance(pointer[-1], int) and pointer[:-1] in doc.spans:
        return doc.locate_in_string(pointer[:-1], pointer[-1])
    return doc.locate(pointer)
