"""The derived matrix (``sealflow test --matrix``): the failures every step must survive, from the definition alone.

From the plan, for every step that calls out (an action, a model, an agent) and every approval gate, the
scenarios of the design brief are built as cases and run like any other (:func:`~.runner.run_case`), on top of a
*base* case: the first case of the definition's test file whose run reaches the step (its input and model
answers; without a test file, an empty input); for a gate, the first such case that approves it, so a
conditional gate opens. Every gate is approved unless the scenario says otherwise:

``normal``        the base case as it is
``retry``         each error class the step's retry class lists, ``max_attempts - 1`` times, then success: the
                  step must end succeeded within ``max_attempts`` (a model's ``invalid_output`` may be repaired
                  inside one attempt)
``exhausted``     the first listed class on every attempt: the step fails after exactly ``max_attempts``, and
                  the run fails (to the dead letters) unless ``on_error`` routes the class
``fatal``         ``invalid_request`` (never retryable): the step fails at its first attempt
``duplicate``     once the run has ended, the step's messages delivered again: each is refused, the action is not
                  called again, the run does not change (it ends as ``normal`` did)
``crash``         the worker running the step dies after the step's work and before its result is committed: the
                  attempt's lease ends and it runs again, and the run ends as ``normal`` did, no completed effect
                  applied twice (an action whose target cannot deduplicate waits for a person instead: ``held``)
``cancel``        the run cancelled while the step runs: it ends cancelled (compensations run)
``revoked``       (a step that re-authorises: by default one whose action writes) the initiator loses the
                  step's permissions as the run reaches it: the step is refused (``unauthorized``) before its action
                  runs, and the run fails
``reject``, ``expire``   a gate rejected, or left to expire: the run fails closed, and nothing after the gate runs

Each run is also held to the engine's invariants (:func:`~.runner.invariants`: a declared end state, bounded
attempts, no completed effect run again, no engine error, the audit chain verifies). A scenario that cannot
apply says so (``-``: the step has no retry class, is not reached by the base case, is a gate's column on a
step without one).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sealflow.core.errors import ERROR_CLASSES
from sealflow.dsl.errors import Location
from sealflow.dsl.kinds import traits_of
from sealflow.dsl.plan import Plan, PlanStep
from sealflow.execution.actions import REGISTRY, Registry
from sealflow.testing.workflows.runner import CaseResult, World, run_case
from sealflow.testing.workflows.spec import Case, Fault

SCENARIOS = ("normal", "retry", "exhausted", "fatal", "duplicate", "crash", "cancel", "revoked", "reject",
             "expire")


@dataclasses.dataclass
class Cell:
    """One step x scenario: what happened, and whether it is what the scenario requires."""

    outcome: str
    ok: bool = True
    problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def applies(self) -> bool:
        return self.outcome != "-"


NOT_APPLICABLE = Cell("-")


@dataclasses.dataclass
class Matrix:
    definition: str
    rows: dict[str, dict[str, Cell]]

    @property
    def ok(self) -> bool:
        return all(cell.ok for row in self.rows.values() for cell in row.values())

    def problems(self) -> list[str]:
        return [f"{step} / {scenario}: {p}" for step, row in self.rows.items() for scenario, cell in row.items()
                for p in cell.problems]


def _case(base: Case, name: str, *, approvals: dict[str, str] | None = None, faults: tuple[Fault, ...] | None = None,
          cancel_at: str | None = None, revoke_before: str | None = None,
          expect: dict[str, Any] | None = None) -> Case:
    """``base`` as a scenario: its input and answers, with the scenario's approvals and one injection."""
    return dataclasses.replace(base, name=name, expect=expect or {"state": "completed"}, expect_at={},
                               approvals=base.approvals if approvals is None else approvals,
                               faults=() if faults is None else faults, cancel_at=cancel_at,
                               revoke_before=revoke_before)


def _gates(plan: Plan) -> set[str]:
    return {s.id for s in plan.steps if s.approval is not None or s.requires_approval_if is not None}


def _approves(answer: Any) -> bool:
    """Whether a case's answer to a gate approves it (as it is, or edited)."""
    return answer == "approve" or isinstance(answer, dict)


def _approve_all(plan: Plan, base: Case) -> dict[str, Any]:
    return {**{gate: "approve" for gate in _gates(plan)}, **base.approvals}


def _end(result: CaseResult) -> str:
    return result.state or "not started"


def _cell(result: CaseResult, wanted: tuple[str, ...], *, step: str | None = None,
          step_state: str | None = None, tries: int | None = None, at_most: int | None = None) -> Cell:
    problems = list(result.violations)
    # a write the base case does not answer and may not make for real: say so (the cell cannot mean much without it)
    problems += list(dict.fromkeys(what for _, what in result.problems if what.startswith("unanswered:")))
    states = result.attempts.get(step or "", [])
    if result.state not in wanted:
        problems.append(f"expected the run to end {' or '.join(wanted)}, it ended {_end(result)}")
    if step_state is not None and (not states or states[-1] != step_state):
        problems.append(f"expected step {step} to end {step_state}, its attempts: {states or 'none'}")
    if tries is not None and len(states) != tries:
        problems.append(f"expected {tries} attempt(s) of {step}, it had {len(states)}")
    if at_most is not None and len(states) > at_most:
        problems.append(f"expected at most {at_most} attempt(s) of {step}, it had {len(states)}")
    outcome = _end(result)
    if result.state == "failed" and result.run_id:
        outcome = "failed"
    return Cell(outcome, not problems, problems)


def derive(plan: Plan, cases: tuple[Case, ...] = (), *, registry: Registry = REGISTRY,
           world: World | None = None, real_actions: frozenset[str] = frozenset()) -> Matrix:
    """Run every scenario of every step of ``plan`` (see the module docstring) and return the table. ``cases``
    (the definition's test file's) give the base of each step: the first case whose run reaches it (so a branch
    only some inputs take is tested too); for a gate, the first such case that approves it (so that a gate opened
    only under a condition opens)."""
    bases = [_case(c, "normal", approvals=_approve_all(plan, c), faults=(), cancel_at=None)
             for c in (cases or (base_case((), plan, real_actions),))]
    normals = [(c, run_case(plan, c, registry=registry, world=world)) for c in bases]
    rows: dict[str, dict[str, Cell]] = {}
    gates = _gates(plan)
    for step in plan.steps:
        calls = traits_of(step.kind).calls_out
        if not calls and step.id not in gates:
            continue
        row = dict.fromkeys(SCENARIOS, NOT_APPLICABLE)
        # the first case whose run reaches the step is its base (a branch only some inputs take is still tested)
        found = next(((c, r) for c, r in normals if step.id in r.steps), None)
        if found is None:
            row["normal"] = Cell("not reached")
            rows[step.id] = row
            continue
        base, normal = found
        row["normal"] = _cell(normal, ("completed", "failed", "cancelled", "timed_out"))
        if calls:
            row.update(_calls_out(plan, step, base, registry, world))
        row["crash"] = _crash(plan, step, base, normal, registry, world)
        if step.id in gates:
            opener = next((b for b, written, (_, r) in zip(bases, cases, normals, strict=False)
                           if _approves(written.approvals.get(step.id)) and step.id in r.steps), base)
            row.update(_gate(plan, step, opener, registry, world))
        rows[step.id] = row
    return Matrix(plan.name, rows)


def _routed(step: PlanStep, error: str) -> bool:
    return any(error in route.errors for route in step.on_error)


def _calls_out(plan: Plan, step: PlanStep, base: Case, registry: Registry, world: World | None) -> dict[str, Cell]:
    out: dict[str, Cell] = {}
    policy = step.retry
    listed = [c for c in policy.on if ERROR_CLASSES.get(c)]
    if listed and policy.max_attempts > 1:
        problems: list[str] = []
        ends: set[str] = set()
        for error in listed:
            case = _case(base, f"retry {error}", faults=(Fault(step.id, error, policy.max_attempts - 1),))
            cell = _cell(run_case(plan, case, registry=registry, world=world), ("completed", "failed", "cancelled",
                                                                               "timed_out"),
                         step=step.id, step_state="succeeded", at_most=policy.max_attempts)
            problems += [f"{error}: {p}" for p in cell.problems]
            ends.add(cell.outcome)
        out["retry"] = Cell(f"ok x{len(listed)}" if not problems else "/".join(sorted(ends)), not problems, problems)
    error = listed[0] if listed else "unavailable"
    case = _case(base, "exhausted", faults=(Fault(step.id, error, max(policy.max_attempts, 1)),))
    result = run_case(plan, case, registry=registry, world=world)
    wanted = ("completed", "failed", "cancelled", "timed_out") if _routed(step, error) else ("failed",)
    out["exhausted"] = _cell(result, wanted, step=step.id, step_state="failed", tries=max(policy.max_attempts, 1))
    if not _routed(step, "invalid_request"):
        case = _case(base, "fatal", faults=(Fault(step.id, "invalid_request", 1),))
        out["fatal"] = _cell(run_case(plan, case, registry=registry, world=world), ("failed",), step=step.id,
                             step_state="failed", tries=1)
    case = _case(base, "duplicate", faults=(Fault(step.id, "duplicate", 1),))
    out["duplicate"] = _cell(run_case(plan, case, registry=registry, world=world),
                             ("completed", "failed", "cancelled", "timed_out"))
    case = _case(base, "cancel", cancel_at=step.id)
    out["cancel"] = _cell(run_case(plan, case, registry=registry, world=world), ("cancelled",))
    registered = registry.get(step.action) if step.action else None
    meta = plan.actions.get(step.action or "")
    effect = registered.effect if registered is not None else meta.effect if meta is not None else None
    if step.permissions and step.needs_reauthorization(effect):
        case = _case(base, "revoked", revoke_before=step.id)
        result = run_case(plan, case, registry=registry, world=world)
        routed = _routed(step, "unauthorized")
        cell = _cell(result, ("failed", *(("completed", "cancelled") if routed else ())), step=step.id,
                     step_state="failed")
        if result.calls_at(step.id):
            cell.problems.append(f"the action of {step.id} ran after its permissions were revoked")
            cell.ok = False
        out["revoked"] = cell
    return out


def _crash(plan: Plan, step: PlanStep, base: Case, normal: CaseResult, registry: Registry,
           world: World | None) -> Cell:
    """The worker dies at ``step`` once, after its work and before its commit: the run must end as it did without
    the crash; an action whose target cannot deduplicate must wait for a person instead of acting again."""
    registered = registry.get(step.action) if step.action else None
    if registered is not None and not registered.honours_idempotency_key:
        case = _case(base, "crash", faults=(Fault(step.id, "crash", 1),), expect={"state": "waiting"})
        result = run_case(plan, case, registry=registry, world=world)
        cell = _cell(result, ("waiting",))
        if cell.ok:
            cell.outcome = "held"
        return cell
    case = _case(base, "crash", faults=(Fault(step.id, "crash", 1),))
    result = run_case(plan, case, registry=registry, world=world)
    ended = normal.attempts[step.id][-1] if normal.attempts.get(step.id) else None
    cell = _cell(result, (normal.state or "completed",), step=step.id, step_state=ended)
    for problem in result.problems:  # the crash not injected (the step committed nothing here)
        if "not injected" in problem[1]:
            cell.problems.append(problem[1])
    cell.ok = not cell.problems
    return cell


def _gate(plan: Plan, step: PlanStep, base: Case, registry: Registry, world: World | None) -> dict[str, Cell]:
    out: dict[str, Cell] = {}
    after = _after(plan, step.id)
    for answer in ("reject", "expire"):
        case = _case(base, answer, approvals={**base.approvals, step.id: answer})
        result = run_case(plan, case, registry=registry, world=world)
        routed = _routed(step, "policy_denied")  # the author routes a refusal on (an escalation step)
        cell = _cell(result, ("failed", "timed_out", *(("completed",) if routed else ())))
        if result.state == "completed" and not routed:
            cell.problems.append("the gate did not fail closed: the run completed")
        # a gate that the condition did not open (requires_approval_if false) lets the run go on: not a failure
        opened = f"{step.id}@gate" in result.attempts or step.approval is not None
        if not opened:
            out[answer] = Cell("not opened")
            continue
        ran_after = sorted(after & set(result.steps))
        if ran_after:
            cell.problems.append(f"steps after the gate ran: {', '.join(ran_after)}")
        cell.ok = not cell.problems
        out[answer] = cell
    return out


_SUCCESS_EDGES = ("next", "case", "default", "skip")


def _after(plan: Plan, step_id: str) -> set[str]:
    """The steps reached on from ``step_id``'s success (not its error routes), for the gate scenarios."""
    by_id = {s.id: s for s in plan.steps}

    def onward(s: PlanStep) -> list[str]:
        return [n for n in ([s.next] if s.next else []) + [e.target for e in s.edges if e.kind in _SUCCESS_EDGES]
                if n]

    seen: set[str] = set()
    todo = onward(by_id[step_id])
    while todo:
        current = todo.pop()
        if current in seen or current not in by_id:
            continue
        seen.add(current)
        todo += onward(by_id[current])
    return seen


def base_case(cases: tuple[Case, ...], plan: Plan, real_actions: frozenset[str] = frozenset()) -> Case:
    """The first case of the definition's test file, else an empty input with no answers (a write or irreversible
    action of the project's then runs only if ``real_actions`` lists it: a test does not act on the world)."""
    if cases:
        return cases[0]
    return Case(name="base", location=Location(f"<{plan.name}>", 0, 0), input={}, actions={}, steps={}, answers={},
                faults=(), approvals={}, cancel_at=None, expect={}, expect_at={}, real_actions=real_actions)


def render(matrix: Matrix) -> str:
    """The table: one row per step, one column per scenario; a failing cell is marked ``!``."""
    width = max([len("step"), *(len(s) for s in matrix.rows)]) + 2
    cols = {s: max(len(s), *(len(_mark(r[s])) for r in matrix.rows.values())) + 2 for s in SCENARIOS} \
        if matrix.rows else {s: len(s) + 2 for s in SCENARIOS}
    lines = [f"matrix: {matrix.definition}",
             "step".ljust(width) + "".join(s.ljust(cols[s]) for s in SCENARIOS)]
    for step, row in matrix.rows.items():
        lines.append(step.ljust(width) + "".join(_mark(row[s]).ljust(cols[s]) for s in SCENARIOS))
    problems = matrix.problems()
    lines += [f"  ! {p}" for p in problems]
    lines.append("every scenario holds" if not problems else f"{len(problems)} problem(s)")
    return "\n".join(lines)


def _mark(cell: Cell) -> str:
    return cell.outcome if cell.ok else f"!{cell.outcome}"
