"""How the fan-out kinds compile: ``map`` (a sub-flow per item) and ``parallel`` (branches, each a sub-flow).

A sub-flow compiles like the top level (defaults, retry classes, caps, control flow) into nested plan steps;
its ``next``, switch and ``on_error`` targets are its own steps or ``end`` (which ends the item or branch, not
the run). Step ids are unique in the whole definition, so ``steps.<id>`` names one step wherever it is read.

Fan-out does not nest: a ``map`` or ``parallel`` inside a sub-flow is refused (C419). A nested map would put
``concurrency x concurrency`` items in flight and store ``max_items x max_items`` children under one step,
beyond what either declared bound says; a map over a flattened list expresses the same work with one bound.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sealflow.dsl.document import Pointer
from sealflow.dsl.kinds import traits_of
from sealflow.dsl.limits import MAP_CONCURRENCY_MAX, MAP_ITEMS_MAX, PARALLEL_BRANCHES_MAX
from sealflow.dsl.model import Step
from sealflow.dsl.plan import BranchPlan, MapPlan, ParallelPlan, PlanStep

if TYPE_CHECKING:
    from sealflow.dsl.model import Definition

#: fields of a fan-out step itself; every other common field belongs on the sub-flow's steps
FANOUT_STEP_FIELDS = frozenset({"id", "name", "description", "when", "next", "on_error", "lint", "map", "parallel"})
_PERCENT = re.compile(r"^(100|[1-9]?[0-9])%$")


class FanOutKinds:
    """Methods of :class:`~sealflow.dsl.compiler.Compiler` for ``map`` and ``parallel`` steps."""

    if TYPE_CHECKING:
        d: Definition

        def error(self, code: str, message: str, pointer: Pointer, hint: str | None = None, *,
                  key: bool = False) -> None: ...

        def _flow(self, steps: list[Step], base: Pointer) -> list[PlanStep | None]: ...

        def _flow_checks_of(self, steps: tuple[PlanStep, ...], start: str, base: Pointer) -> None: ...

    def _fanout_fields(self, s: Step, p: Pointer) -> None:
        """A fan-out step carries only its id, names, ``when``, ``next``, ``on_error`` and ``lint``."""
        for key in fields_beyond(s, FANOUT_STEP_FIELDS):
            self.error("C418", f"{s.kinds()[0]} step {s.id!r} does not take {key!r}: it belongs on the steps of "
                       "its sub-flow", p + (key,), f"move {key!r} into the sub-flow's steps", key=True)

    def _subflow(self, steps: list[Step], base: Pointer) -> tuple[str, tuple[PlanStep, ...]] | None:
        compiled = self._flow(steps, base)
        if any(c is None for c in compiled):
            return None
        done = tuple(c for c in compiled if c is not None)
        self._flow_checks_of(done, done[0].id, base)
        return done[0].id, done

    def _map(self, s: Step, p: Pointer) -> MapPlan | None:
        m = s.map
        assert m is not None
        mp = p + ("map",)
        if not 1 <= m.concurrency <= MAP_CONCURRENCY_MAX:
            self.error("C408", f"map concurrency {m.concurrency} is outside 1..{MAP_CONCURRENCY_MAX}",
                       mp + ("concurrency",))
        if not 1 <= m.max_items <= MAP_ITEMS_MAX:
            self.error("C408", f"map max_items {m.max_items} is outside 1..{MAP_ITEMS_MAX}", mp + ("max_items",))
        count, percent = 0, None
        if isinstance(m.tolerate_failures, str):
            match = _PERCENT.match(m.tolerate_failures)
            if match is None:
                self.error("C418", f"tolerate_failures {m.tolerate_failures!r} is neither a count nor a percentage",
                           mp + ("tolerate_failures",), "write a count (3) or a percentage ('5%')")
            else:
                percent = int(match.group(1))
        else:
            count = m.tolerate_failures
            if not 0 <= count <= m.max_items:
                self.error("C408", f"tolerate_failures {count} is outside 0..max_items ({m.max_items})",
                           mp + ("tolerate_failures",))
        flow = self._subflow(m.steps, mp)
        if flow is None:
            return None
        return MapPlan(items=m.items, concurrency=m.concurrency, max_items=m.max_items, tolerate_failures=count,
                       tolerate_percent=percent, start=flow[0], steps=flow[1])

    def _parallel(self, s: Step, p: Pointer) -> ParallelPlan | None:
        par = s.parallel
        assert par is not None
        if not 2 <= len(par.branches) <= PARALLEL_BRANCHES_MAX:
            self.error("C408", f"parallel has {len(par.branches)} branches; use 2..{PARALLEL_BRANCHES_MAX}",
                       p + ("parallel", "branches"))
        branches = []
        for j, branch in enumerate(par.branches):
            flow = self._subflow(branch.steps, p + ("parallel", "branches", j))
            if flow is not None:
                branches.append(BranchPlan(start=flow[0], steps=flow[1]))
        if len(branches) != len(par.branches):
            return None
        return ParallelPlan(branches=tuple(branches))

    def _fanout(self, s: Step, kind: str, p: Pointer) -> dict[str, Any] | None:
        """The plan fields of a fan-out step, or None when its sub-flows did not compile."""
        self._fanout_fields(s, p)
        value = self._map(s, p) if kind == "map" else self._parallel(s, p)
        return None if value is None else {kind: value}


def fields_beyond(s: Step, allowed: frozenset[str]) -> list[str]:
    """The fields ``s`` sets (as written: ``with``, not ``with_``) that are not in ``allowed``."""
    return [field.alias or name for name, field in Step.model_fields.items()
            if name in s.model_fields_set and (field.alias or name) not in allowed]


def nested_fanout(steps: list[Step], base: Pointer, inside: str | None = None) -> list[tuple[Pointer, str, str]]:
    """(pointer, step id, enclosing fan-out id) of each fan-out step inside a sub-flow (refused: C419)."""
    found: list[tuple[Pointer, str, str]] = []
    for i, s in enumerate(steps):
        p = base + ("steps", i)
        kinds = [k for k in s.kinds() if traits_of(k).fans_out]
        if kinds and inside is not None:
            found.append((p + (kinds[0],), s.id, inside))
        for below, sub in s.subflows():
            found.extend(nested_fanout(sub, p + below[:-1], inside or s.id))
    return found


def all_model_steps(steps: list[Step], base: Pointer = ()) -> list[tuple[Pointer, Step]]:
    """Every authored step with its pointer, those of sub-flows after their fan-out step."""
    found: list[tuple[Pointer, Step]] = []
    for i, s in enumerate(steps):
        p = base + ("steps", i)
        found.append((p, s))
        for below, sub in s.subflows():
            found.extend(all_model_steps(sub, p + below[:-1]))
    return found
