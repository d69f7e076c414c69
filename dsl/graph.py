"""Control-flow analysis of a plan: reachability, ancestors, cycles, and drawings.

The graph's nodes are step ids plus ``end``; its edges are the plan's explicit
``Edge`` records. Everything here is a pure function of an adjacency mapping.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from sealflow.dsl.plan import END, Plan

Adjacency = Mapping[str, Iterable[str]]


def reachable(adj: Adjacency, start: str) -> set[str]:
    """Every node reachable from ``start`` (itself included)."""
    seen = {start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in adj.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def ancestors(adj: Adjacency) -> dict[str, set[str]]:
    """For each node, the nodes with a path to it (itself only if it lies on a cycle)."""
    reverse: dict[str, set[str]] = {}
    for src, targets in adj.items():
        for dst in targets:
            reverse.setdefault(dst, set()).add(src)
    result: dict[str, set[str]] = {}
    for node in list(adj) + [END]:
        seen: set[str] = set()
        queue = deque(reverse.get(node, ()))
        while queue:
            cur = queue.popleft()
            if cur in seen:
                continue
            seen.add(cur)
            queue.extend(reverse.get(cur, ()))
        result[node] = seen
    return result


def find_back_edge(adj: Adjacency, start: str) -> tuple[str, str] | None:
    """An edge ``(src, dst)`` that closes a cycle reachable from ``start``, if any (iterative DFS)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour: dict[str, int] = {}
    stack: list[tuple[str, Iterable[str]]] = [(start, iter(adj.get(start, ())))]
    colour[start] = GREY
    while stack:
        node, it = stack[-1]
        for nxt in it:
            state = colour.get(nxt, WHITE)
            if state == GREY:
                return node, nxt
            if state == WHITE and nxt in adj:
                colour[nxt] = GREY
                stack.append((nxt, iter(adj.get(nxt, ()))))
                break
        else:
            colour[node] = BLACK
            stack.pop()
    return None


def adjacency(plan: Plan) -> dict[str, list[str]]:
    return {s.id: [e.target for e in s.edges] for s in plan.steps}


def _label(kind: str, label: str | None) -> str:
    if label:
        return label
    return {"next": "", "skip": "skipped", "error": "on error", "timeout": "on timeout", "default": "default"}.get(
        kind, kind
    )


def to_mermaid(plan: Plan) -> str:
    lines = ["flowchart TD", f"  start((start)) --> {plan.start}"]
    for s in plan.steps:
        detail = s.action or s.kind
        lines.append(f'  {s.id}["{s.id}<br/><small>{detail}</small>"]')
    lines.append("  end_((end))")
    for s in plan.steps:
        for e in s.edges:
            target = "end_" if e.target == END else e.target
            label = _label(e.kind, e.label).replace('"', "'")
            arrow = "-.->" if e.kind in ("error", "timeout", "skip") else "-->"
            lines.append(f"  {s.id} {arrow}{'|' + label + '|' if label else ''} {target}")
    return "\n".join(lines) + "\n"


def to_dot(plan: Plan) -> str:
    lines = [f'digraph "{plan.name}.v{plan.version}" {{', "  rankdir=TB;", '  start [shape=circle, label="start"];',
             '  end [shape=doublecircle, label="end"];', f'  start -> "{plan.start}";']
    for s in plan.steps:
        detail = s.action or s.kind
        lines.append(f'  "{s.id}" [shape=box, label="{s.id}\\n{detail}"];')
    for s in plan.steps:
        for e in s.edges:
            label = _label(e.kind, e.label).replace('"', "'")
            style = ", style=dashed" if e.kind in ("error", "timeout", "skip") else ""
            lines.append(f'  "{s.id}" -> "{e.target}" [label="{label}"{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"
