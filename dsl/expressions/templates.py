"""Templates: text holding ``${{ expr }}``.

A template is literal text and expressions. When the whole text is exactly one
``${{ expr }}`` (whitespace allowed inside the braces, none outside) it is *single*
and renders to the expression's value with its type (a map stays a map). Otherwise
each value is interpolated as text: null -> "", true/false, numbers as written,
strings as they are, maps and lists as compact JSON; the result is bounded like any
string (1,000,000 characters).

The end of an expression is the first ``}}`` outside a string literal and outside
braces opened in the expression, so ``${{ {'a': {'b': 1}} }}`` and ``${{ '}}' }}``
work. There is no escape for a literal ``${{``: write ``${{ '${{' }}``.
Error offsets are relative to the whole template text; an unclosed ``${{`` is X301
at the ``${{``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, cast

from sealflow.dsl.expressions.compile import Reference
from sealflow.dsl.expressions.errors import EvaluationError, ExpressionError
from sealflow.dsl.expressions.expression import Expression, compile_cached, evaluate
from sealflow.dsl.expressions.values import MAX_STRING, to_text

OPEN = "${{"
CLOSE = "}}"


@dataclasses.dataclass(frozen=True)
class Template:
    """Parsed template: ``parts`` are ``str`` literals and ``(Expression, offset)`` pairs."""

    text: str
    parts: tuple[str | tuple[Expression, int], ...]

    @property
    def single(self) -> bool:
        return len(self.parts) == 1 and not isinstance(self.parts[0], str)

    def expressions(self) -> list[tuple[Expression, int]]:
        return [part for part in self.parts if not isinstance(part, str)]

    def references(self) -> list[Reference]:
        """Every reference of every expression, offsets relative to the template text."""
        return [dataclasses.replace(ref, offset=ref.offset + at)
                for expr, at in self.expressions() for ref in expr.references()]


def is_template(text: Any) -> bool:
    return isinstance(text, str) and OPEN in text


def _find_close(text: str, start: int) -> int:
    """Index of the ``}}`` ending the expression that starts at ``start``, or -1."""
    depth, quote, i, n = 0, None, start, len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "{":
            depth += 1
        elif c == "}":
            if depth == 0 and text.startswith(CLOSE, i):
                return i
            depth = max(0, depth - 1)
        i += 1
    return -1


def parse_template(text: str) -> Template:
    """Split ``text`` into literals and parsed expressions; raise :class:`ExpressionError`."""
    if not isinstance(text, str):
        raise ExpressionError("X301", "a template is text", 0)
    parts: list[str | tuple[Expression, int]] = []
    literal, pos = [], 0
    while True:
        opened = text.find(OPEN, pos)
        if opened < 0:
            literal.append(text[pos:])
            break
        literal.append(text[pos:opened])
        start = opened + len(OPEN)
        end = _find_close(text, start)
        if end < 0:
            _unclosed(text, opened, start)
        raw = text[start:end]
        body = raw.strip()
        at = start + (len(raw) - len(raw.lstrip()))
        if not body:
            raise ExpressionError("X301", "empty ${{ }}", opened,
                                  "write an expression inside, e.g. ${{ input.x }}", text)
        try:
            expr = compile_cached(body)
        except ExpressionError as exc:
            raise exc.shifted(at, text) from None
        if any(literal):
            parts.append("".join(literal))
        literal = []
        parts.append((expr, at))
        pos = end + len(CLOSE)
    if any(literal):
        parts.append("".join(literal))
    return Template(text, tuple(parts))


def _unclosed(text: str, opened: int, start: int) -> None:
    """Raise for a ``${{`` without its ``}}``; the expression's own error if a ``}}`` follows."""
    naive = text.find(CLOSE, start)
    if naive >= 0:
        raw = text[start:naive]
        at = start + (len(raw) - len(raw.lstrip()))
        try:
            compile_cached(raw.strip())
        except ExpressionError as exc:
            raise exc.shifted(at, text) from None
    raise ExpressionError("X301", "unclosed '${{'", opened, "close the expression with }}", text)


def render(template: Template, context: dict[str, Any], *, clock: Callable[[], float] | None = None) -> Any:
    """A single template's typed value, or the interpolated text."""
    if template.single:
        return evaluate(cast("tuple[Expression, int]", template.parts[0])[0], context, clock=clock)
    out, size = [], 0
    for part in template.parts:
        piece = part if isinstance(part, str) else to_text(evaluate(part[0], context, clock=clock))
        size += len(piece)
        if size > MAX_STRING:
            raise EvaluationError(f"rendered text longer than {MAX_STRING:,} characters")
        out.append(piece)
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def _cached(text: str) -> Template:
    return parse_template(text)


def render_value(value: Any, context: dict[str, Any], *, clock: Callable[[], float] | None = None) -> Any:
    """Render every template string inside ``value`` (dict values and list items, recursively;
    dict keys stay as they are). Templates are parsed once and cached."""
    try:
        return _render_value(value, context, clock)
    except RecursionError:
        raise EvaluationError("value nested too deeply to render") from None


def _render_value(value: Any, context: dict[str, Any], clock: Any) -> Any:
    if isinstance(value, str):
        return render(_cached(value), context, clock=clock) if OPEN in value else value
    if isinstance(value, dict):
        return {k: _render_value(v, context, clock) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_render_value(v, context, clock) for v in value]
    return value
