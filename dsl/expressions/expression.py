"""An expression: :func:`parse` (check and compile once), :func:`check` (static references),
:func:`evaluate` (run against a context). The language itself is described in
:mod:`sealflow.dsl.expressions`."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection, Container, Iterator, Mapping
from typing import Any

from lark import ParseTree, Tree
from lark.exceptions import LarkError, UnexpectedInput

from sealflow.dsl.expressions.catalogue import CLOSERS, OPENERS, closest, scan, syntax_error
from sealflow.dsl.expressions.compile import Compiler, Reference, Run
from sealflow.dsl.expressions.errors import EvaluationError, ExpressionError
from sealflow.dsl.expressions.parser import parser as _parser
from sealflow.dsl.expressions.values import Env, type_name

MAX_LENGTH = 4096
MAX_DEPTH = 64

RUN_FIELDS = ("id", "workflow", "version", "initiator", "tenant", "attempt")
STEP_FIELDS = ("output", "status")


class Expression:
    """A parsed, checked expression, compiled for evaluation; immutable."""

    __slots__ = ("text", "_run", "_refs", "_funcs")

    def __init__(self, text: str, run: Run, refs: list[tuple[Reference, int, int]], funcs: list[tuple[str, int]]):
        self.text, self._run, self._refs, self._funcs = text, run, tuple(refs), tuple(funcs)

    def references(self) -> list[Reference]:
        return [ref for ref, _, _ in self._refs]

    def functions(self) -> list[tuple[str, int]]:
        return list(self._funcs)

    def evaluate(self, context: dict[str, Any], *, clock: Callable[[], float] | None = None) -> Any:
        return evaluate(self, context, clock=clock)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expression) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Expression({self.text!r})"


# ---------------------------------------------------------------- bounds of the text

def _check_nesting(text: str) -> None:
    if sum(map(text.count, OPENERS)) <= MAX_DEPTH:  # too few brackets to nest too deep: skip the scan
        return
    depth = 0
    for tok in scan(text):
        if tok.kind == "op" and tok.value in OPENERS:
            depth += 1
            if depth > MAX_DEPTH:
                raise ExpressionError("X307", f"brackets nested deeper than {MAX_DEPTH} levels",
                                      tok.start, "split it: compute parts in a set step")
        elif tok.kind == "op" and tok.value in CLOSERS:
            depth = max(0, depth - 1)


def _check_depth(tree: ParseTree) -> None:
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ExpressionError("X307", f"expression nested deeper than {MAX_DEPTH} levels",
                                  node.meta.start_pos if not node.meta.empty else 0,
                                  "split it: compute parts in a set step")
        stack.extend((c, depth + 1) for c in node.children if isinstance(c, Tree))


# ---------------------------------------------------------------- API

def parse(text: str) -> Expression:
    """Parse and check ``text``; raise :class:`ExpressionError` (X301, X302, X305-X307)."""
    if not isinstance(text, str):
        raise ExpressionError("X301", f"an expression is text, not {type_name(text)}", 0)
    if len(text) > MAX_LENGTH:
        raise ExpressionError("X307", f"expression longer than {MAX_LENGTH} characters",
                              MAX_LENGTH, "split it: compute parts in a set step", text)
    try:
        _check_nesting(text)
        try:
            tree = _parser().parse(text)
        except UnexpectedInput as exc:
            raise syntax_error(text, exc) from None
        except LarkError as exc:  # pragma: no cover - defensive
            raise ExpressionError("X301", f"syntax error: {exc}", 0) from None
        _check_depth(tree)
        compiler = Compiler()
        run = compiler.build(tree)
    except ExpressionError as exc:
        raise exc.shifted(0, text) from None
    return Expression(text, run, compiler.refs, compiler.funcs)


@functools.lru_cache(maxsize=4096)
def compile_cached(text: str) -> Expression:
    """:func:`parse`, cached (an expression is immutable): for the runtime's hot paths."""
    return parse(text)


def check(expr: Expression, *, known_steps: Collection[str], ran_before: Container[str],
          allow_output: bool, allow_item: bool = False,
          inner: Mapping[str, str] | None = None, allow_event: bool = False) -> list[ExpressionError]:
    """Every static problem of the references: X303, X304, X308, X309, X310, in text order. ``item`` and
    ``index`` are known only with ``allow_item`` (inside a map's steps); ``inner`` maps the ids of steps inside
    a fan-out sub-flow (not readable here) to their fan-out step. ``known_steps`` and ``ran_before`` are only
    asked about membership (``known_steps`` is listed for a hint on an unknown step), so views serve as well as
    sets."""
    return sorted(_check(expr, known_steps, ran_before, allow_output, allow_item, inner or {}, allow_event),
                  key=lambda e: e.offset)


def _check(expr: Expression, known: Collection[str], ran: Container[str], allow_output: bool, allow_item: bool,
           inner: Mapping[str, str], allow_event: bool = False) -> Iterator[ExpressionError]:
    def error(code: str, message: str, offset: int, hint: str | None = None) -> ExpressionError:
        return ExpressionError(code, message, offset, hint, expr.text)

    for ref, step_at, field_at in expr._refs:
        if ref.root == "event" and not allow_event:
            yield error("X310", "'event' is only defined in a wait's match", ref.offset,
                        "event is the event a wait step is offered (event.id, event.type, event.source, event.data)")
        elif ref.root in ("item", "index") and not allow_item:
            yield error("X310", f"'{ref.root}' is only defined inside a map's steps", ref.offset,
                        "item is the element a map's sub-flow runs for, index its position")
        elif ref.root == "steps" and ref.step is not None and ref.step not in known and ref.step in inner:
            yield error("X310", f"step '{ref.step}' runs inside '{inner[ref.step]}' (once per item or branch) and "
                        "cannot be read from here", step_at,
                        f"read the results as steps.{inner[ref.step]}.output, a list in item or branch order")
        elif ref.root == "output" and not allow_output:
            yield error("X308", "'output' is only defined in validate and requires_approval_if",
                        ref.offset, "refer to a step's result as steps.<id>.output")
        elif ref.root == "steps":
            if ref.step is None:
                yield error("X303", "'steps' must be followed by a step id", ref.offset,
                            "write steps.<id>.output or steps.<id>.status")
                continue
            if ref.step not in known:
                guess = closest(ref.step, known)
                yield error("X303", f"unknown step '{ref.step}'", step_at,
                            f"did you mean '{guess}'?" if guess else "steps: " + ", ".join(sorted(known)))
                continue
            if ref.step not in ran:
                yield error("X304", f"step '{ref.step}' cannot have run before this expression",
                            step_at, "only steps that run before this point on every path can be "
                            "read; move the expression or the step")
            if ref.field not in STEP_FIELDS:
                what = f"unknown field '{ref.field}' of" if ref.field else "missing field of"
                yield error("X309", f"{what} steps.{ref.step}", field_at,
                            f"write steps.{ref.step}.output or steps.{ref.step}.status")
        elif ref.root == "run" and ref.field is not None and ref.field not in RUN_FIELDS:
            guess = closest(ref.field, RUN_FIELDS)
            yield error("X309", f"unknown field '{ref.field}' of run", field_at,
                        (f"did you mean run.{guess}? " if guess else "") + "run has: " + ", ".join(RUN_FIELDS))


def evaluate(expr: Expression, context: dict[str, Any], *, clock: Callable[[], float] | None = None) -> Any:
    """The value of ``expr`` in ``context``; raise :class:`EvaluationError` on any runtime problem."""
    try:
        return expr._run(Env(context, clock or time.time))
    except EvaluationError:
        raise
    except RecursionError:
        raise EvaluationError("evaluation nested too deeply") from None
    except (ArithmeticError, ValueError, TypeError, AttributeError, MemoryError) as exc:
        raise EvaluationError(f"cannot evaluate {expr.text[:60]!r}: {exc}") from None
