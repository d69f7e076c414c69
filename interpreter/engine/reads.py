"""Which earlier results a step can read: only those are read from the store for its attempt.

A step's expressions and templates (its arguments, ``when``, keys, validations, approval conditions, switch
cases, prompts, its fan-out items and sub-flows) and the workflow's own (its ``output``, rendered by whichever
step ends the run) name the steps they read as ``steps.<id>`` or ``steps["<id>"]``. Every string of the
step's plan and of the plan outside its steps is scanned; a mention of ``steps`` in any other form (an
index computed at run time, ``steps`` as a whole) makes the answer "all of them" (None). The scan may name
more than the expressions read (a string that is not an expression, a sub-flow's own steps): those are read
for nothing, never missed. The step's own id is always named (a fan-out child's output is its last step's).

So a step's claim reads a bounded number of results instead of every one of a long run's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from sealflow.dsl.plan import Plan, PlanStep

_MENTION = re.compile(r"(?<![A-Za-z0-9_.])steps\b")
_DOTTED = re.compile(r"\s*(?:\?\.|\.)\s*([A-Za-z_][A-Za-z0-9_-]*)")
_INDEXED = re.compile(r"\s*\[\s*(?:'([^'\\]*)'|\"([^\"\\]*)\")\s*\]")

_CACHE: dict[tuple[str, str], frozenset[str] | None] = {}
_MAX = 4096


def named_results(plan: Plan, step: PlanStep) -> frozenset[str] | None:
    """The step ids whose results ``step`` may read (None: possibly any)."""
    key = (plan.digest, step.id)
    if key in _CACHE and plan.digest:
        return _CACHE[key]
    names: set[str] | None = {step.id}
    outside = plan.model_dump(mode="json", exclude={"steps", "actions", "digest", "input_schema"})
    for text in _strings([outside, step.model_dump(mode="json")]):
        names = _add(names, text)
        if names is None:
            break
    got = None if names is None else frozenset(names)
    if plan.digest:
        if len(_CACHE) >= _MAX:
            _CACHE.clear()
        _CACHE[key] = got
    return got


def _add(names: set[str] | None, text: str) -> set[str] | None:
    if names is None or "steps" not in text:
        return names
    for m in _MENTION.finditer(text):
        rest = text[m.end():]
        dotted = _DOTTED.match(rest)
        if dotted:
            names.add(dotted.group(1))
            continue
        indexed = _INDEXED.match(rest)
        if indexed:
            names.add(indexed.group(1) if indexed.group(1) is not None else indexed.group(2))
            continue
        return None  # `steps` read some other way: any result may be read
    return names


def _strings(values: list[Any]) -> Iterator[str]:
    stack = list(values)
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):  # keys name things (arguments, fields), never expressions; prose is not read
            stack.extend(x for k, x in v.items() if k != "description")
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
