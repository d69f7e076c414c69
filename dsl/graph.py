"""Control-flow analysis of a plan: reachability, ancestors, cycles, and drawings.

The graph's nodes are step ids plus ``end``; its edges are the plan's explicit
``Edge`` records. Everything here is a pure function of an adjacency mapping.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping

from sealflow.dsl.kinds import traits_of
from sealflow.dsl.plan import END, Plan, PlanStep

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


class Reachability:
    """Answers "is there a path of one edge or more from ``src`` to ``dst``" on one control-flow graph (``src`` is
    then an ancestor of ``dst``: it can have run before it), without a set of ancestors per node.

    Built in time and memory linear in nodes and edges, by one depth-first search (Tarjan's, iterative): each
    node's strongly connected component (numbered in reverse topological order, so a path between two components
    runs from the higher number to the lower), whether that component holds a cycle, and each component root's
    interval in the search tree (a node discovered inside it is reachable from it). A query is answered at once
    when the components or the tree decide it; otherwise by a search of the components between the two, pruned by
    their order and the intervals, whose answers are kept per ``dst`` (each component is searched at most once
    for a given ``dst``).
    """

    __slots__ = ("_comp", "_members", "_cyclic", "_pre", "_root_pre", "_root_last", "_succ", "_memo")

    def __init__(self, adj: Adjacency):
        succ: dict[str, list[str]] = {}
        for src, targets in adj.items():
            succ.setdefault(src, []).extend(targets)
            for dst in succ[src]:
                succ.setdefault(dst, [])
        pre: dict[str, int] = {}
        low: dict[str, int] = {}
        comp: dict[str, int] = {}
        stack: list[str] = []
        roots: list[str] = []  # each component's root (its first node discovered), by component number
        members: list[list[str]] = []  # each component's nodes, by component number
        last: dict[str, int] = {}  # the highest discovery number in each node's search subtree
        counter = 0
        for start in succ:
            if start in pre:
                continue
            pre[start] = low[start] = counter
            counter += 1
            stack.append(start)
            work: list[tuple[str, Iterator[str]]] = [(start, iter(succ[start]))]
            while work:
                node, it = work[-1]
                for nxt in it:
                    if nxt not in pre:
                        pre[nxt] = low[nxt] = counter
                        counter += 1
                        stack.append(nxt)
                        work.append((nxt, iter(succ[nxt])))
                        break
                    if nxt not in comp:  # on the stack: in the component being built
                        low[node] = min(low[node], pre[nxt])
                else:
                    work.pop()
                    last[node] = counter - 1
                    if work:
                        parent = work[-1][0]
                        low[parent] = min(low[parent], low[node])
                    if low[node] == pre[node]:
                        number = len(roots)
                        roots.append(node)
                        at = len(stack) - 1
                        while stack[at] != node:
                            at -= 1
                        group = stack[at:]
                        del stack[at:]
                        for member in group:
                            comp[member] = number
                        members.append(group)
        self._comp = comp
        self._members = members
        self._pre = pre
        self._succ = succ
        self._root_pre = [pre[r] for r in roots]
        self._root_last = [last[r] for r in roots]
        self._cyclic = [len(group) > 1 for group in members]
        for node, targets in succ.items():
            if node in targets:
                self._cyclic[comp[node]] = True
        self._memo: dict[str, dict[int, bool]] = {}

    def reaches(self, src: str, dst: str) -> bool:
        """Whether a path of at least one edge leads from ``src`` to ``dst`` (``src`` is an ancestor of ``dst``)."""
        comp = self._comp
        if src not in comp or dst not in comp:
            return False
        c_src, c_dst = comp[src], comp[dst]
        if c_src == c_dst:
            return self._cyclic[c_src]
        if c_src < c_dst:  # components are numbered sinks first: a path only goes to a lower number
            return False
        if self._root_pre[c_src] <= self._pre[dst] <= self._root_last[c_src]:  # in the search subtree
            return True
        return self._search(c_src, dst)

    def _search(self, c_src: int, dst: str) -> bool:
        """Whether component ``c_src`` (not ``dst``'s, numbered higher) reaches ``dst``: a depth-first search of
        the components, memoised per ``dst``. The components form an acyclic graph, so one searched to its end
        never reaches ``dst``, and those on the path to one that does all do."""
        comp, first, last = self._comp, self._root_pre, self._root_last
        c_dst, at = comp[dst], self._pre[dst]
        memo = self._memo.setdefault(dst, {})
        if c_src in memo:
            return memo[c_src]

        def decided(c: int) -> bool | None:
            if c in memo:
                return memo[c]
            if c == c_dst or first[c] <= at <= last[c]:
                return True
            if c < c_dst:
                return False
            return None

        path: list[int] = [c_src]
        work: list[Iterator[str]] = [self._out_of(c_src)]
        while work:
            for nxt in work[-1]:
                c = comp[nxt]
                if c == path[-1]:
                    continue
                answer = decided(c)
                if answer is None:
                    path.append(c)
                    work.append(self._out_of(c))
                    break
                if answer:
                    for on_path in path:
                        memo[on_path] = True
                    return True
            else:
                memo[path.pop()] = False
                work.pop()
        return False

    def _out_of(self, c: int) -> Iterator[str]:
        """The targets of the edges leaving the nodes of component ``c`` (its own nodes among them)."""
        succ = self._succ
        return (nxt for node in self._members[c] for nxt in succ[node])

    def size(self) -> int:
        """How many entries the index holds: its nodes, edges and components, and the answers memoised by the
        searches (each a component, at most once per ``dst`` asked about)."""
        return (len(self._comp) + sum(map(len, self._succ.values())) + len(self._members)
                + sum(map(len, self._memo.values())))


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
    return adjacency_of(plan.steps)


def adjacency_of(steps: Iterable[PlanStep]) -> dict[str, list[str]]:
    """The control flow of one flow (the plan's steps, or a sub-flow's): step id -> edge targets."""
    return {s.id: [e.target for e in s.edges] for s in steps}


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
    "fanout": ('[/"', '"\\]', "trapezium"),
    "join": ('[\\"', '"/]', "invtrapezium"),
    "call": ('[["', '"]]', "box, peripheries=2"),
}
_DASHED = ("error", "timeout", "skip")


Node = tuple[str, str, str, str]  # (id, shape, title, detail)
EdgeRow = tuple[str, str, str, bool]  # (source, target, label, dashed)
Group = tuple[str, str, list[str]]  # (id, label, node ids): a fan-out's sub-flow, drawn as a box


def _nodes_and_edges(plan: Plan) -> tuple[list[Node], list[EdgeRow], list[Group]]:
    """The drawing as data: nodes, edges, and groups (the sub-flows of fan-out steps).

    Beyond the plan's edges: ``succeed`` and ``fail`` steps get an edge to the end node; a step with
    ``requires_approval_if`` gets its gate drawn as an approval node on the way to its successors (taken when
    the condition holds; the plain edge is taken otherwise). A ``map`` or ``parallel`` step fans out into its
    sub-flows (each a group), whose ends meet at a join node (``<id>@join``) from which the step goes on.
    """
    nodes: list[Node] = []
    edges: list[EdgeRow] = []
    groups: list[Group] = []
    _flow(plan.steps, END, nodes, edges, groups)
    return nodes, edges, groups


def drawing(plan: Plan) -> tuple[list[Node], list[EdgeRow], list[Group]]:
    """What ``sealflow graph`` draws, as data (:func:`_nodes_and_edges`): the /ui run page draws it as SVG."""
    return _nodes_and_edges(plan)


def _flow(steps: Iterable[PlanStep], end: str, nodes: list[Node], edges: list[EdgeRow], groups: list[Group]) -> None:
    for s in steps:
        kind = str(s.kind)
        shape = {"approval": "approval", "wait": "wait", "switch": "switch", "succeed": "terminal",
                 "fail": "terminal", "map": "fanout", "parallel": "fanout", "call": "call"}.get(kind, "step")
        detail = s.action or kind
        if kind == "approval" and s.approval is not None:
            detail = "approval: " + ", ".join(s.approval.approvers)
        elif kind == "fail" and s.fail is not None:
            detail = f"fail: {s.fail.error}"
        elif s.wait is not None and s.wait.event is not None:
            detail = f"waits for event {s.wait.event}" + (f" from {s.wait.source}" if s.wait.source else "")
        elif s.map is not None:
            detail = f"map over {s.map.items}: {s.map.concurrency} at once, at most {s.map.max_items} items"
        elif s.parallel is not None:
            detail = f"parallel: {len(s.parallel.branches)} branches"
        elif s.call is not None:
            detail = f"calls {s.call.workflow} v{s.call.version} ({s.call.digest[:19]}...)"
        nodes.append((s.id, shape, s.id, detail))
        source = s.id
        if s.subflows():
            source = f"{s.id}@join"
            nodes.append((source, "join", "join", "every item ended" if s.map else "every branch ended"))
            for j, (_, sub, start) in enumerate(s.subflows()):
                group = f"{s.id}@{j}"
                inner: list[Node] = []
                _flow(sub, source, inner, edges, groups)
                groups.append((group, f"each item of {s.id}" if s.map else f"{s.id}: branch {j + 1}",
                               [n[0] for n in inner]))
                nodes.extend(inner)
                edges.append((s.id, start, f"{s.map.concurrency} at once" if s.map else f"branch {j + 1}", False))
        gate = f"{s.id}@gate" if s.gate is not None else None
        if gate is not None and s.gate is not None:
            nodes.append((gate, "approval", "approval gate", ", ".join(s.gate.approvers)))
        for e in s.edges:
            label = _label(e.kind, e.label)
            target = end if e.target == END else e.target
            from_ = source if e.kind == "next" else s.id
            if gate is not None and e.kind == "next":
                edges.append((s.id, gate, "approval needed", False))
                edges.append((gate, target, "approved", False))
                edges.append((s.id, target, "no approval needed", False))
            else:
                edges.append((from_, target, label, e.kind in _DASHED))
        if traits_of(kind).terminal:
            edges.append((s.id, end, "succeeded" if kind == "succeed" else "failed", kind == "fail"))


def _mermaid_id(node: str) -> str:
    return "end_" if node == END else node.replace("@", "__")


def _node_lines(nodes: list[Node], groups: list[Group], node_line: Callable[[Node, str], str],
                opening: Callable[[str, str], list[str]], closing: str) -> list[str]:
    """The nodes outside any group, then each group (``opening`` lines, its nodes indented, ``closing``)."""
    grouped = {n for _, _, members in groups for n in members}
    by_id = {n[0]: n for n in nodes}
    lines = [node_line(n, "  ") for n in nodes if n[0] not in grouped]
    for group, label, members in groups:
        lines.extend(opening(group, label))
        lines.extend(node_line(by_id[m], "    ") for m in members)
        lines.append(closing)
    return lines


def to_mermaid(plan: Plan) -> str:
    nodes, edges, groups = _nodes_and_edges(plan)

    def node_line(node: Node, indent: str) -> str:
        opening, closing, _ = _SHAPES[node[1]]
        text = f"{node[2]}<br/><small>{node[3]}</small>".replace('"', "'")
        return f"{indent}{_mermaid_id(node[0])}{opening}{text}{closing}"

    lines = ["flowchart TD", f"  start((start)) --> {plan.start}"]
    lines += _node_lines(nodes, groups, node_line, lambda g, label: [f'  subgraph {_mermaid_id(g)}["{label}"]'],
                         "  end")
    lines.append("  end_((end))")
    for src, dst, label, dashed in edges:
        arrow = "-.->" if dashed else "-->"
        label = label.replace('"', "'")
        lines.append(f"  {_mermaid_id(src)} {arrow}{'|' + label + '|' if label else ''} {_mermaid_id(dst)}")
    return "\n".join(lines) + "\n"


def to_dot(plan: Plan) -> str:
    nodes, edges, groups = _nodes_and_edges(plan)

    def node_line(node: Node, indent: str) -> str:
        text = f"{node[2]}\\n{node[3]}".replace('"', "'")
        return f'{indent}"{node[0]}" [shape={_SHAPES[node[1]][2]}, label="{text}"];'

    lines = [f'digraph "{plan.name}.v{plan.version}" {{', "  rankdir=TB;", '  start [shape=circle, label="start"];',
             '  end [shape=doublecircle, label="end"];', f'  start -> "{plan.start}";']
    def cluster(group: str, label: str) -> list[str]:
        return [f'  subgraph "cluster_{group}" {{', f'    label="{label}"; style=dashed;']

    lines += _node_lines(nodes, groups, node_line, cluster, "  }")
    for src, dst, label, dashed in edges:
        style = ", style=dashed" if dashed else ""
        label = label.replace('"', "'")
        lines.append(f'  "{src}" -> "{dst}" [label="{label}"{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"
