"""The compiled plan: immutable, self-contained and content-addressed.

A :class:`Plan` is what the runtime executes. Defaults are applied, retry
classes resolved and inlined, durations in milliseconds, referenced schemas
inlined, every edge explicit. Its ``digest`` is the sha256 of its canonical
JSON (RFC 8785) without the digest itself and without ``actions`` (action
metadata comes from code, not from the definition). The interpreter reads only
this module of ``dsl``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sealflow.dsl.document import Pointer
from sealflow.dsl.kinds import kinds_with

PLAN_FORMAT = 1

#: the kinds of :class:`sealflow.dsl.kinds.StepKind`, as the plan's field type (tests/dsl/test_kinds.py: they agree)
StepKind = Literal["action", "ai", "agent", "switch", "approval", "wait", "set", "fail", "succeed", "map", "parallel",
                   "call"]
END = "end"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RetryPolicy(_Frozen):
    name: str | None = None
    on: tuple[str, ...] = ()
    max_attempts: int = 1
    initial_ms: int = 1000
    factor: float = 2.0
    max_ms: int = 30_000
    jitter: Literal["full", "equal", "none"] = "full"


class BudgetPlan(_Frozen):
    max_steps: int | None = None
    max_runtime_ms: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_tool_calls: int | None = None


class Edge(_Frozen):
    """A possible transfer of control: ``kind`` says when it is taken."""

    kind: Literal["next", "case", "default", "skip", "error", "timeout"]
    target: str
    label: str | None = None


class AiPlan(_Frozen):
    model: str
    fallback: tuple[str, ...] = ()
    prompt_template: str | None = None
    prompt_ref: dict[str, Any] | None = None
    system: str | None = None
    output_schema: dict[str, Any] | None = None
    max_tokens: int | None = None
    temperature: float | None = None


class SwitchCasePlan(_Frozen):
    when: str | None
    next: str


class ApprovalPlan(_Frozen):
    approvers: tuple[str, ...]
    quorum: int = 1
    timeout_ms: int
    on_timeout: str = "reject"  # "reject" or a step id to route to
    show: str | None = None
    separation_of_duties: bool = True
    #: True when the gate comes from ``requires_approval_if`` on an effect step
    implicit: bool = False
    #: the JSON Schema an approver's edit of the show value must pass (``editable``; None: not editable)
    editable_schema: dict[str, Any] | None = None


class McpToolPlan(_Frozen):
    """An MCP tool as the agent may call it: the declared effect and permissions, and the locked description,
    input schema and digests (from ``sealflow.mcp.lock``: the plan digest covers them). ``name`` is what the
    model sees: ``mcp.SERVER.TOOL``."""

    server: str
    tool: str
    name: str
    effect: str
    permissions: tuple[str, ...] = ()
    description: str
    input_schema: dict[str, Any]
    description_digest: str
    input_schema_digest: str
    output_schema_digest: str


class AgentPlan(_Frozen):
    model: str
    goal: str
    tools: tuple[str, ...] = ()
    #: MCP tools (issue 36); None when the agent names none, so that older plans keep their digests
    mcp_tools: tuple[McpToolPlan, ...] | None = None
    max_steps: int
    max_tool_calls: int | None = None
    output_schema: dict[str, Any] | None = None
    system: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    #: tools whose calls wait for a person (irreversible tools always do); ``approval`` says who decides
    approval_required: tuple[str, ...] = ()
    approval: ApprovalPlan | None = None


class WaitPlan(_Frozen):
    for_ms: int | None = None
    until: str | None = None
    #: an event wait: the event type, its source (None: any of the tenant's sources), the expression over
    #: ``event`` (and the run) that must hold, the JSON Schema of ``event.data``, and how long to wait
    event: str | None = None
    source: str | None = None
    match: str | None = None
    event_schema: dict[str, Any] | None = None
    timeout_ms: int | None = None


class FailPlan(_Frozen):
    error: str
    message: str = ""


class ValidateRulePlan(_Frozen):
    check: str
    message: str | None = None


class ErrorRoutePlan(_Frozen):
    errors: tuple[str, ...]
    next: str


class CompensationPlan(_Frozen):
    action: str
    args: dict[str, Any] = Field(default_factory=dict)
    timeout_ms: int
    retry: RetryPolicy


class CallbackPlan(_Frozen):
    """An action step's result posted later by the system it called (``callback:``)."""

    timeout_ms: int
    #: JSON Schema of the posted result (None: any JSON)
    result_schema: dict[str, Any] | None = None


class StepBudgetPlan(_Frozen):
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_tool_calls: int | None = None


class MapPlan(_Frozen):
    """A ``map``: the sub-flow ``steps`` (from ``start``) runs once per element of ``items``."""

    items: str
    concurrency: int
    max_items: int
    #: failures tolerated: a count, or (``tolerate_percent``) a percentage of the items, rounded down
    tolerate_failures: int = 0
    tolerate_percent: int | None = None
    start: str
    steps: tuple[PlanStep, ...]

    def tolerated(self, n_items: int) -> int:
        """How many of ``n_items`` items may fail while the step still succeeds."""
        if self.tolerate_percent is not None:
            return n_items * self.tolerate_percent // 100
        return self.tolerate_failures


class BranchPlan(_Frozen):
    """A branch of a ``parallel``: a sub-flow from ``start``."""

    start: str
    steps: tuple[PlanStep, ...]


class ParallelPlan(_Frozen):
    branches: tuple[BranchPlan, ...]


class CallPlan(_Frozen):
    """A ``call``: run the definition ``workflow`` v``version`` (compiled beside this one; its plan is ``plan``,
    pinned by ``digest``) with ``input`` (templates over this run). The parent's digest covers ``digest``, not
    the child's body: a changed child changes the parent's digest through it."""

    workflow: str
    version: int
    digest: str
    input: dict[str, Any] = Field(default_factory=dict)
    plan: Plan


class ActionMeta(_Frozen):
    permissions: tuple[str, ...] = ()
    effect: Literal["read", "write", "irreversible"] = "read"
    honours_idempotency_key: bool = True


class PlanStep(_Frozen):
    id: str
    index: int
    kind: StepKind
    action: str | None = None
    ai: AiPlan | None = None
    agent: AgentPlan | None = None
    switch: tuple[SwitchCasePlan, ...] | None = None
    approval: ApprovalPlan | None = None
    wait: WaitPlan | None = None
    assign: dict[str, Any] | None = None
    fail: FailPlan | None = None
    succeed_output: Any = None
    map: MapPlan | None = None
    parallel: ParallelPlan | None = None
    call: CallPlan | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    when: str | None = None
    timeout_ms: int
    retry: RetryPolicy
    permissions: tuple[str, ...] = ()
    #: as written (None: decided by the action's effect at run time, see :meth:`needs_reauthorization`)
    reauthorize: bool | None = None
    idempotency_key: str | None = None
    validations: tuple[ValidateRulePlan, ...] = ()
    requires_approval_if: str | None = None
    #: the gate used when ``requires_approval_if`` is true (top-level ``approvals`` defaults)
    gate: ApprovalPlan | None = None
    on_error: tuple[ErrorRoutePlan, ...] = ()
    compensate: CompensationPlan | None = None
    concurrency: str | None = None
    lock: str | None = None
    circuit_breaker: str | None = None
    #: where the action runs: ``thread`` / ``process`` as written (None: the action's, else the worker's default)
    isolation: Literal["thread", "process"] | None = None
    budget: StepBudgetPlan = Field(default_factory=StepBudgetPlan)
    #: the action's result is posted later by the system it called (None: the action's return value is it)
    callback: CallbackPlan | None = None
    #: where control goes after success (or skip): a step id or ``end``; None for terminal kinds
    next: str | None = None
    edges: tuple[Edge, ...] = ()


    def subflows(self) -> tuple[tuple[Pointer, tuple[PlanStep, ...], str], ...]:
        """A fan-out step's sub-flows: (pointer below the step, steps, start); empty for other kinds."""
        if self.map is not None:
            return ((("map", "steps"), self.map.steps, self.map.start),)
        if self.parallel is not None:
            return tuple((("parallel", "branches", j, "steps"), b.steps, b.start)
                         for j, b in enumerate(self.parallel.branches))
        return ()

    def needs_reauthorization(self, effect: str | None) -> bool:
        """Whether to re-check permissions right before this step, given its action's effect."""
        if self.reauthorize is not None:
            return self.reauthorize
        return effect in ("write", "irreversible")


class TriggerPlan(_Frozen):
    schedule: dict[str, Any] | None = None
    event: dict[str, Any] | None = None


#: id of a plan's steps tuple -> (that tuple, step id -> step); the tuple is kept, so its id is not reused
_STEP_INDEX: dict[int, tuple[tuple[PlanStep, ...], dict[str, PlanStep]]] = {}


class Plan(_Frozen):
    format: int = PLAN_FORMAT
    language: int = 1
    name: str
    version: int
    owner: str
    description: str | None = None
    trigger: TriggerPlan | None = None
    input_schema: dict[str, Any] | None = None
    permissions: tuple[str, ...] = ()
    budget: BudgetPlan = Field(default_factory=BudgetPlan)
    concurrency: dict[str, Any] | None = None
    priority: Literal["critical", "high", "normal", "low"] = "normal"
    start: str
    steps: tuple[PlanStep, ...]
    output: Any = None
    #: action metadata known at compile time (from code; not part of the digest)
    actions: dict[str, ActionMeta] = Field(default_factory=dict)
    digest: str = ""

    def step(self, step_id: str) -> PlanStep:
        got = _STEP_INDEX.get(id(self.steps))
        if got is not None and got[0] is self.steps:
            index = got[1]
        else:  # each plan object is indexed once (a 1,000-step plan was scanned at every step)
            index = {s.id: s for s in self.steps}
            if len(_STEP_INDEX) >= 256:
                _STEP_INDEX.clear()
            _STEP_INDEX[id(self.steps)] = (self.steps, index)
        try:
            return index[step_id]
        except KeyError:
            raise KeyError(step_id) from None

    def step_map(self) -> dict[str, PlanStep]:
        return {s.id: s for s in self.steps}

    def all_steps(self) -> Iterator[tuple[Pointer, PlanStep]]:
        """Every step with its definition pointer, the steps of fan-out sub-flows after their parent."""
        yield from walk(self.steps, ())

    def canonical_json(self) -> bytes:
        return canonical_bytes(_without_absent_kinds(self.model_dump(mode="json", exclude={"digest", "actions"}),
                                                     canonical=True))

    def compute_digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.canonical_json()).hexdigest()

    def with_digest(self) -> Plan:
        return self.model_copy(update={"digest": self.compute_digest()})

    def to_json(self, *, indent: int | None = 2) -> str:
        body = _without_absent_kinds(self.model_dump(mode="json"))
        ordered = {"digest": body.pop("digest"), **body}
        return json.dumps(ordered, indent=indent, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        plan = cls.model_validate_json(text)
        if plan.digest and plan.digest != plan.compute_digest():
            raise ValueError(f"plan digest mismatch: recorded {plan.digest}, computed {plan.compute_digest()}")
        for _, s in plan.all_steps():  # a called workflow's plan is what its pinned digest says
            if s.call is not None and not (s.call.digest == s.call.plan.digest == s.call.plan.compute_digest()):
                raise ValueError(f"plan digest mismatch: step {s.id!r} pins {s.call.workflow} v{s.call.version} "
                                 f"as {s.call.digest}, but the plan it carries computes {s.call.plan.compute_digest()}")
        return plan

    def with_called(self) -> Iterator[Plan]:
        """This plan, then every plan it calls (the called plans' own calls too), each once."""
        seen: set[str] = set()
        todo: list[Plan] = [self]
        while todo:
            plan = todo.pop(0)
            if plan.digest and plan.digest in seen:
                continue
            seen.add(plan.digest)
            yield plan
            todo.extend(call.plan for _, call in plan.called())

    def called(self) -> Iterator[tuple[PlanStep, CallPlan]]:
        """Every ``call`` step of this plan (sub-flows included) with its call; not the called plans' own."""
        for _, s in self.all_steps():
            if s.call is not None:
                yield s, s.call


def walk(steps: tuple[PlanStep, ...], base: Pointer) -> Iterator[tuple[Pointer, PlanStep]]:
    """``steps`` with their pointers (under ``base``), each fan-out step followed by its sub-flows' steps."""
    for s in steps:
        p = base + ("steps", s.index)
        yield p, s
        for below, sub, _ in s.subflows():
            yield from walk(sub, p + below[:-1])


#: fields added to a plan node after plans were first signed and stored, left out of its JSON while absent (None),
#: so that a plan not using them keeps the digest (and the signatures, and the stored plans) it had before them:
#: node -> its added fields
ADDED_FIELDS: dict[str, tuple[str, ...]] = {
    "wait": ("event", "source", "match", "event_schema", "timeout_ms"),  # a wait for an event (issue 35)
    "agent": ("mcp_tools",),  # MCP tools (issue 36)
}
#: the same, of a step itself
ADDED_STEP_FIELDS: tuple[str, ...] = ("callback",)  # an action's result posted later (issue 35)


def _without_absent_kinds(body: dict[str, Any], *, canonical: bool = False) -> dict[str, Any]:
    """The plan's JSON without the ``map: null`` and ``parallel: null`` of the steps that are neither, and without
    the absent fields of :data:`ADDED_FIELDS`: a plan that does not fan out keeps the digest it had before the
    language knew fan-out, one that does not wait for an event the digest it had before waits could."""
    def clean(steps: list[dict[str, Any]]) -> None:
        for s in steps:
            for kind in kinds_with("fans_out"):
                if s.get(kind, 0) is None:
                    del s[kind]
            for name in ADDED_STEP_FIELDS:
                if s.get(name, 0) is None:
                    del s[name]
            for gate in (s.get("approval"), s.get("gate"), (s.get("agent") or {}).get("approval")):
                if isinstance(gate, dict) and gate.get("editable_schema", 0) is None:
                    del gate["editable_schema"]  # (an editable gate: issue 35)
            for node, added in ADDED_FIELDS.items():
                fields = s.get(node)
                if isinstance(fields, dict):
                    for name in added:
                        if fields.get(name, 0) is None:
                            del fields[name]
            call = s.get("call")
            if isinstance(call, dict):  # (a call: issue 35) the digest stands for the called plan's body
                if canonical:
                    del call["plan"]
                else:
                    call["plan"] = _without_absent_kinds(call["plan"])
            if s.get("map"):
                clean(s["map"]["steps"])
            for b in (s.get("parallel") or {}).get("branches", ()):
                clean(b["steps"])

    clean(body.get("steps", []))
    return body


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 (JSON Canonicalization Scheme) bytes of ``value``."""
    import rfc8785

    return rfc8785.dumps(value)


MapPlan.model_rebuild()
CallPlan.model_rebuild()
BranchPlan.model_rebuild()
