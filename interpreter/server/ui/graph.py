"""A run's graph as SVG, drawn from what ``sealflow graph`` draws (:func:`sealflow.dsl.graph.drawing`), each
node coloured by its step's state (a CSS class, ``state-<state>``) and linked to the step's section of the page.

The layout is by layers: a node's layer is its distance from ``start`` along the plan's edges (breadth first, so
a loop's edge back is drawn upwards, dashed like an error route); nodes of one layer side by side in the order
the plan lists them. Nothing here runs a script or needs Graphviz.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from markupsafe import Markup, escape

from sealflow.dsl.graph import drawing
from sealflow.dsl.plan import END

if TYPE_CHECKING:
    from sealflow.dsl.plan import Plan

WIDTH, HEIGHT, GAP_X, GAP_Y, MARGIN = 176, 46, 24, 40, 12
#: the most nodes drawn side by side; a wider layer wraps onto more rows
MAX_ACROSS = 6
#: a plan of more steps than this is drawn only when asked (its page links to the drawing)
MAX_DRAWN = 300
START = "start"


def anchor(step_id: str) -> str:
    """The id of a step's section on the run page (``step-`` and the step id, ``@`` as ``--``)."""
    return "step-" + step_id.replace("@", "--")


def _layers(first: str, nodes: list[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    succ: dict[str, list[str]] = {}
    for src, dst in edges:
        succ.setdefault(src, []).append(dst)
    layer = {START: 0, first: 1}
    queue = deque([first])
    while queue:
        node = queue.popleft()
        for nxt in succ.get(node, ()):
            if nxt not in layer:
                layer[nxt] = layer[node] + 1
                queue.append(nxt)
    deepest = max(layer.values(), default=0)
    for node in nodes:  # unreachable ones (a compensation's flow): below the rest
        if node not in layer:
            deepest += 1
            layer[node] = deepest
    return layer


def svg(plan: Plan, states: dict[str, str], links: dict[str, str] | None = None) -> Markup:
    """The plan's graph as an inline ``<svg>`` (``states``: step id -> the state of its latest attempt; ``links``:
    step id -> where its node links to, by default its section ``#step-...``)."""
    nodes, edges, _ = drawing(plan)
    titles = {n[0]: (n[2], n[3]) for n in nodes}
    order = [START] + [n[0] for n in nodes] + [END]
    titles[START], titles[END] = ("start", ""), ("end", "")
    pairs = [(START, plan.start)] + [(src, dst) for src, dst, _, _ in edges]
    layer = _layers(plan.start, order, pairs)
    rows: dict[int, list[str]] = {}
    row_of: dict[str, int] = {}
    row = -1
    by_depth: dict[int, list[str]] = {}
    for n in order:  # (one pass: a 1,000-step chain has 1,000 layers)
        if n in layer:
            by_depth.setdefault(layer[n], []).append(n)
    for depth in sorted(by_depth):
        members = by_depth[depth]
        for i in range(0, len(members), MAX_ACROSS):
            row += 1
            rows[row] = members[i:i + MAX_ACROSS]
            for n in rows[row]:
                row_of[n] = row
    across = max((len(r) for r in rows.values()), default=1)
    width = MARGIN * 2 + across * WIDTH + (across - 1) * GAP_X
    height = MARGIN * 2 + (row + 1) * HEIGHT + row * GAP_Y
    where: dict[str, tuple[float, float]] = {}
    for r, members in rows.items():
        offset = (width - (len(members) * WIDTH + (len(members) - 1) * GAP_X)) / 2
        for i, n in enumerate(members):
            where[n] = (offset + i * (WIDTH + GAP_X), MARGIN + r * (HEIGHT + GAP_Y))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="graph" class="graph" viewBox="0 0 {width:.0f} {height:.0f}" '
           f'width="{width:.0f}" height="{height:.0f}" role="group" aria-label="the run\'s graph: each step and its '
           f'state, linked to its section">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" class="arrowhead"/></marker></defs>']
    for src, dst, label, dashed in [(START, plan.start, "", False)] + edges:
        if src not in where or dst not in where:
            continue
        (x1, y1), (x2, y2) = where[src], where[dst]
        back = row_of[dst] <= row_of[src]
        cls = "edge dashed" if dashed or back else "edge"
        if back:  # upwards (a loop) or sideways: around the right of the nodes
            sx, sy, ex, ey = x1 + WIDTH, y1 + HEIGHT / 2, x2 + WIDTH, y2 + HEIGHT / 2
            bend = max(sx, ex) + 30
            path = f"M {sx:.0f} {sy:.0f} C {bend:.0f} {sy:.0f}, {bend:.0f} {ey:.0f}, {ex:.0f} {ey:.0f}"
        else:
            path = f"M {x1 + WIDTH / 2:.0f} {y1 + HEIGHT:.0f} L {x2 + WIDTH / 2:.0f} {y2:.0f}"
        title = f"<title>{escape(label)}</title>" if label else ""
        out.append(f'<path class="{cls}" d="{path}" marker-end="url(#arrow)">{title}</path>')
    for node, (x, y) in where.items():
        title, detail = titles.get(node, (node, ""))
        state = states.get(node, "pending" if node not in (START, END) else "none")
        # (the state is written, not only coloured; the link's name is its visible text)
        second = "" if node in (START, END) else (f"{state} · {detail}" if detail else state)
        box = (f'<rect x="{x:.0f}" y="{y:.0f}" width="{WIDTH}" height="{HEIGHT}" rx="6" class="node state-{state}"/>'
               f'<text x="{x + WIDTH / 2:.0f}" y="{y + 19:.0f}" class="node-title">{escape(_cut(title, 24))}</text>'
               f'<text x="{x + WIDTH / 2:.0f}" y="{y + 36:.0f}" class="node-detail"> {escape(_cut(second, 28))}</text>')
        if node in (START, END):
            out.append(f"<g><title>{escape(title)}</title>{box}</g>")
        else:
            href = (links or {}).get(node) or f"#{anchor(node)}"
            out.append(f'<a href="{escape(href)}" data-step="{escape(node)}">'
                       f"<title>{escape(f'{node}: {state}' + (f' ({detail})' if detail else ''))}</title>{box}</a>")
    out.append("</svg>")
    return Markup("".join(out))


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most - 1] + "…"
