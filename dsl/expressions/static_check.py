"""Static checks of every expression and template in a definition.

Each bare expression and each ``${{ }}`` template is parsed, and its references
checked against the steps that can have run before it is evaluated (the step's
ancestors in the control-flow graph). Errors are located at the offending
character inside the YAML string.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Container, Iterator
from typing import TYPE_CHECKING, Any

from sealflow.dsl import graph
from sealflow.dsl.compiling import CompileContext
from sealflow.dsl.document import Pointer
from sealflow.dsl.errors import Diagnostic
from sealflow.dsl.expressions.errors import ExpressionError
from sealflow.dsl.expressions.expression import Expression, check, compile_cached
from sealflow.dsl.expressions.templates import parse_template
from sealflow.dsl.plan import Plan, PlanStep, walk

if TYPE_CHECKING:
    from sealflow.dsl.loader import Document
    from sealflow.dsl.model import Step

Site = tuple[Pointer, str, Any, bool]  # (pointer, "expr"|"template", value, include_self)
#: the kind of a site that is an expression over ``event`` too (a wait's ``match``)
EVENT_EXPR = "event-expr"


def templates_in(value: Any, pointer: Pointer) -> Iterator[tuple[Pointer, str]]:
    """Every string inside ``value`` (recursively), with its pointer."""
    if isinstance(value, str):
        yield pointer, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from templates_in(v, pointer + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from templates_in(v, pointer + (i,))


def template_syntax(doc: Document) -> list[Diagnostic]:
    """The syntax errors of every ``${{ }}`` template in the raw document, located: reported beside schema
    errors, when the document cannot be compiled, so one pass shows both (references are checked only once it
    compiles)."""
    found = []
    for pointer, text in templates_in(doc.data, ()):
        if "${{" not in text:
            continue
        try:
            parse_template(text)
        except ExpressionError as exc:
            found.append(Diagnostic(exc.code, exc.message, doc.locate_in_string(pointer, exc.offset), hint=exc.hint,
                                    pointer="/".join(str(p) for p in pointer)))
    return found


def step_sites(step: Step, p: Pointer) -> Iterator[tuple[Pointer, str, str, bool, bool]]:
    """(pointer, kind, text, include_self, allow_output) for each expression site of a step."""
    if step.when is not None:
        yield p + ("when",), "expr", step.when, False, False
    for ptr, text in templates_in(step.with_, p + ("with",)):
        yield ptr, "template", text, False, False
    for name in ("idempotency_key", "lock"):
        if getattr(step, name) is not None:
            yield p + (name,), "template", getattr(step, name), False, False
    for j, rule in enumerate(step.validate_):
        if isinstance(rule, str):
            yield p + ("validate", j), "expr", rule, True, True
        else:
            yield p + ("validate", j, "check"), "expr", rule.check, True, True
    if step.requires_approval_if is not None:
        yield p + ("requires_approval_if",), "expr", step.requires_approval_if, True, True
    if step.ai is not None:
        if step.ai.prompt is not None and step.ai.prompt.template is not None:
            yield p + ("ai", "prompt", "template"), "template", step.ai.prompt.template, False, False
        if step.ai.system is not None:
            yield p + ("ai", "system"), "template", step.ai.system, False, False
    if step.agent is not None:
        yield p + ("agent", "goal"), "template", step.agent.goal, False, False
        if step.agent.system is not None:
            yield p + ("agent", "system"), "template", step.agent.system, False, False
    for j, case in enumerate(step.switch or []):
        if case.when is not None:
            yield p + ("switch", j, "when"), "expr", case.when, False, False
    if step.approval is not None and step.approval.show is not None:
        yield p + ("approval", "show"), "expr", step.approval.show, False, False
    if step.wait is not None and step.wait.until is not None:
        yield p + ("wait", "until"), "expr", step.wait.until, False, False
    if step.wait is not None and step.wait.match is not None:  # (evaluated when an event is offered to the wait)
        yield p + ("wait", "match"), EVENT_EXPR, step.wait.match, False, False
    for name, value in (step.set or {}).items():
        if isinstance(value, str):
            yield p + ("set", name), "expr", value, False, False
    if step.fail is not None and step.fail.message:
        yield p + ("fail", "message"), "template", step.fail.message, False, False
    if step.succeed is not None:
        for ptr, text in templates_in(step.succeed.output, p + ("succeed", "output")):
            yield ptr, "template", text, False, False
    if step.compensate is not None:
        for ptr, text in templates_in(step.compensate.with_, p + ("compensate", "with")):
            yield ptr, "template", text, True, False


class _Known:
    """The step ids a flow's expressions may name: those of the flows around it (``outer``) and its own (a
    view: no copy of the top level's ids per sub-flow)."""

    __slots__ = ("_outer", "_own")

    def __init__(self, own: frozenset[str], outer: Collection[str] = frozenset()):
        self._own, self._outer = own, outer

    def __contains__(self, step: object) -> bool:
        return step in self._own or step in self._outer

    def __iter__(self) -> Iterator[str]:
        yield from self._outer
        yield from (s for s in self._own if s not in self._outer)

    def __len__(self) -> int:
        return len(self._outer) + sum(1 for s in self._own if s not in self._outer)


class _RanBefore:
    """The steps that can have run before ``step`` of one flow: its ancestors in the flow's control flow (asked
    of ``reach`` when a reference names them, never listed), ``step`` itself with ``include_self``, and the
    steps ``outer`` holds (those that ran before the flow started: the outer run's, before a fan-out)."""

    __slots__ = ("_reach", "_step", "_outer", "_include_self")

    def __init__(self, reach: graph.Reachability, step: str, outer: Container[str], include_self: bool = False):
        self._reach, self._step, self._outer, self._include_self = reach, step, outer, include_self

    def including_self(self) -> _RanBefore:
        return _RanBefore(self._reach, self._step, self._outer, True)

    def __contains__(self, other: object) -> bool:
        if not isinstance(other, str):
            return False
        return (self._include_self and other == self._step) or self._reach.reaches(other, self._step) \
            or other in self._outer


@dataclasses.dataclass(frozen=True)
class _Scope:
    """What the expressions of one flow may read: ``known`` step ids, the steps ``ran`` before the flow starts
    (the outer run's steps before a fan-out), whether ``item``/``index`` exist, and the ids of steps inside
    sub-flows that are not readable here (``inner``: id -> its fan-out step; a flow's own steps may stay listed,
    as they are known, which the check asks first)."""

    known: _Known
    ran: Container[str]
    allow_item: bool
    inner: dict[str, str]


def _inner_ids(steps: tuple[PlanStep, ...]) -> dict[str, str]:
    """The id of every step inside a sub-flow -> its fan-out step (fan-out does not nest: C419)."""
    return {inner.id: s.id for s in steps for _, sub, _ in s.subflows() for _, inner in walk(sub, ())}


def _check_flow(compiler: CompileContext, steps: list[Step], plan_steps: tuple[PlanStep, ...], base: Pointer,
                scope: _Scope) -> None:
    reach = graph.Reachability(graph.adjacency_of(plan_steps))
    by_id = {s.id: s for s in plan_steps}
    for i, step in enumerate(steps):
        ran = _RanBefore(reach, step.id, scope.ran)
        for pointer, kind, text, include_self, allow_output in step_sites(step, base + ("steps", i)):
            _check_site(compiler, pointer, kind, text, scope, ran.including_self() if include_self else ran,
                        allow_output)
        ps = by_id.get(step.id)
        if step.map is not None:
            _check_site(compiler, base + ("steps", i, "map", "items"), "expr", step.map.items, scope, ran, False)
        if ps is None:
            continue
        subs = ps.subflows()
        authored = step.subflows()
        for (below, sub_plan, _), (_, sub_steps) in zip(subs, authored, strict=True):
            own = frozenset(s.id for _, s in walk(sub_plan, ()))
            sub_scope = _Scope(_Known(own, scope.known), ran, step.map is not None or scope.allow_item,
                               scope.inner)
            _check_flow(compiler, sub_steps, sub_plan, base + ("steps", i) + below[:-1], sub_scope)


def check_plan(compiler: CompileContext, plan: Plan) -> None:
    """Append every expression diagnostic of ``compiler``'s definition to ``compiler.diagnostics``."""
    d = compiler.d
    top = _Scope(_Known(frozenset(s.id for s in plan.steps)), frozenset(), False, _inner_ids(plan.steps))
    _check_flow(compiler, d.steps, plan.steps, (), top)
    reachable = graph.reachable(graph.adjacency(plan), plan.start) - {"end"}

    def run(pointer: Pointer, kind: str, text: str, ran: Container[str], allow_output: bool) -> None:
        _check_site(compiler, pointer, kind, text, top, ran, allow_output)

    for pointer, text in templates_in(d.output, ("output",)):
        run(pointer, "template", text, reachable, False)
    if d.concurrency is not None:
        run(("concurrency", "key"), "template", d.concurrency.key, set(), False)
    if d.trigger is not None and d.trigger.event is not None and d.trigger.event.filter is not None:
        run(("trigger", "event", "filter"), "expr", d.trigger.event.filter, set(), False)


def _check_site(compiler: CompileContext, pointer: Pointer, kind: str, text: str, scope: _Scope,
                ran: Container[str], allow_output: bool) -> None:
    doc = compiler.doc
    try:
        parts: list[tuple[Expression, int]]
        if kind in ("expr", EVENT_EXPR):
            parts = [(compile_cached(text), 0)]
        else:
            parts = parse_template(text).expressions()
    except ExpressionError as exc:
        _report(compiler, doc, pointer, exc, exc.offset)
        return
    for expr, base in parts:
        for problem in check(expr, known_steps=scope.known, ran_before=ran, allow_output=allow_output,
                             allow_item=scope.allow_item, inner=scope.inner, allow_event=kind == EVENT_EXPR):
            _report(compiler, doc, pointer, problem, base + problem.offset)


def _report(compiler: CompileContext, doc: Document, pointer: Pointer, exc: ExpressionError, offset: int) -> None:
    compiler.diagnostics.append(
        Diagnostic(exc.code, exc.message, doc.locate_in_string(pointer, offset), hint=exc.hint,
                   pointer="/".join(str(p) for p in pointer))
    )
