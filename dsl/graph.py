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


#: how each kind of node is drawn: (Mermaid opening, closing), Graphviz shape
_SHAPES = {
    "step": ('["', '"]', "box"),
    "approval": ('{{"', '"}}', "hexagon"),
    "wait": ('(["', '"])', "box, style=rounded"),
    "switch": ('{"', '"}', "diamond"),
    "terminal": ('(["', '"])', "box, style=\"rounded,bold\""),
}
_DASHED = ("error", "timeout", "skip")


def _nodes_and_edges(plan: Plan) -> tuple[list[tuple[str, str, str, str]], list[tuple[str, str, str, bool]]]:
    """The drawing as data: nodes (id, shape, title, detail) and edges (source, target, label, dashed).

    Beyond the plan's edges: ``succeed`` and ``fail`` steps get an edge to the end node; a step with
    ``requires_approval_if`` gets its gate drawn as an approval node on the way to its successors (taken when
    the condition holds; the plain edge is taken otherwise).
    """
    nodes: list[tuple[str, str, str, str]] = []
    edges: list[tuple[str, str, str, bool]] = []
    for s in plan.steps:
        kind = str(s.kind)
        shape = {"approval": "approval", "wait": "wait", "switch": "switch", "succeed": "terminal",
                 "fail": "terminal"}.get(kind, "step")
        detail = s.action or kind
        if kind == "approval" and s.approval is not None:
            detail = "approval: " + ", ".join(s.approval.approvers)
        elif kind == "fail" and s.fail is not None:
            detail = f"fail: {s.fail.error}"
        nodes.append((s.id, shape, s.id, detail))
        gate = f"{s.id}@gate" if s.gate is not None else None
        if gate is not None and s.gate is not None:
            nodes.append((gate, "approval", "approval gate", ", ".join(s.gate.approvers)))
        for e in s.edges:
            label = _label(e.kind, e.label)
            if gate is not None and e.kind == "next":
                edges.append((s.id, gate, "approval needed", False))
                edges.append((gate, e.target, "approved", False))
                edges.append((s.id, e.target, "no approval needed", False))
            else:
                edges.append((s.id, e.target, label, e.kind in _DASHED))
        if kind in ("succeed", "fail"):
            edges.append((s.id, END, "succeeded" if kind == "succeed" else "failed", kind == "fail"))
    return nodes, edges


def _mermaid_id(node: str) -> str:
    return "end_" if node == END else node.replace("@", "__")


def to_mermaid(plan: Plan) -> str:
    nodes, edges = _nodes_and_edges(plan)
    lines = ["flowchart TD", f"  start((start)) --> {plan.start}"]
    for node, shape, title, detail in nodes:
        opening, closing, _ = _SHAPES[shape]
        text = f"{title}<br/><small>{detail}</small>".replace('"', "'")
        lines.append(f"  {_mermaid_id(node)}{opening}{text}{closing}")
    lines.append("  end_((end))")
    for src, dst, label, dashed in edges:
        arrow = "-.->" if dashed else "-->"
        label = label.replace('"', "'")
        lines.append(f"  {_mermaid_id(src)} {arrow}{'|' + label + '|' if label else ''} {_mermaid_id(dst)}")
    return "\n".join(lines) + "\n"


def to_dot(plan: Plan) -> str:
    nodes, edges = _nodes_and_edges(plan)
    lines = [f'digraph "{plan.name}.v{plan.version}" {{', "  rankdir=TB;", '  start [shape=circle, label="start"];',
             '  end [shape=doublecircle, label="end"];', f'  start -> "{plan.start}";']
    for node, shape, title, detail in nodes:
        text = f"{title}\\n{detail}".replace('"', "'")
        lines.append(f'  "{node}" [shape={_SHAPES[shape][2]}, label="{text}"];')
    for src, dst, label, dashed in edges:
        style = ", style=dashed" if dashed else ""
        label = label.replace('"', "'")
        lines.append(f'  "{src}" -> "{dst}" [label="{label}"{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"
