"""What a definition's test cases reached (``sealflow test --coverage``): steps, switch branches, error routes and
compensations, so a reviewer sees what is untested.

A step is reached when a case's run attempted it; a switch branch (``case`` or ``default`` edge) when the switch
ran and its target ran in the same case; an error route (``on_error``, a timeout route) when its step failed in a
case and the route's target ran; a compensation when a case's run attempted ``STEP@compensate``.
"""

from __future__ import annotations

import dataclasses

from sealflow.dsl.plan import Plan
from sealflow.testing.workflows.runner import CaseResult

_BRANCH = ("case", "default")
_ERROR = ("error", "timeout")


@dataclasses.dataclass
class Part:
    """One kind of thing to reach: what exists and what no case reached."""

    total: int
    missing: list[str]

    @property
    def reached(self) -> int:
        return self.total - len(self.missing)


@dataclasses.dataclass
class Coverage:
    definition: str
    parts: dict[str, Part]

    @property
    def complete(self) -> bool:
        return all(not p.missing for p in self.parts.values())


def coverage(plan: Plan, results: list[CaseResult]) -> Coverage:
    ran = [set(r.steps) for r in results]
    # a gate's refusal fails its step (``S@gate``): the step's error routes take it
    failed = [{step.split("@", 1)[0] for step, states in r.attempts.items()
               if states and states[-1] == "failed" and not step.endswith("@compensate")} for r in results]
    compensated = [{step.removesuffix("@compensate") for step in r.attempts if step.endswith("@compensate")}
                   for r in results]
    steps, branches, routes, compensations = [], [], [], []
    for step in plan.steps:
        steps.append((step.id, any(step.id in r for r in ran)))
        for edge in step.edges:
            if edge.kind in _BRANCH:
                name = f"{step.id} -> {edge.target}" + (f" ({edge.label})" if edge.label else "")
                branches.append((name, any(step.id in r and edge.target in r for r in ran)))
            elif edge.kind in _ERROR and edge.target != "end":
                name = f"{step.id} -{edge.label or edge.kind}-> {edge.target}"
                routes.append((name, any(step.id in f and edge.target in r for f, r in zip(failed, ran, strict=True))))
        if step.compensate is not None:
            compensations.append((step.id, any(step.id in c for c in compensated)))

    def part(rows: list[tuple[str, bool]]) -> Part:
        return Part(len(rows), [name for name, hit in rows if not hit])

    return Coverage(plan.name, {"steps": part(steps), "branches": part(branches), "error routes": part(routes),
                                "compensations": part(compensations)})


def render(cov: Coverage) -> str:
    lines = [f"coverage: {cov.definition}"]
    for name, p in cov.parts.items():
        line = f"  {name:<14} {p.reached}/{p.total}"
        if p.missing:
            line += f"  not reached: {', '.join(p.missing)}"
        lines.append(line)
    return "\n".join(lines)
