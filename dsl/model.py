"""The definition as authored: pydantic models over schema-valid YAML data.

These models mirror ``schemas/workflow.schema.json``; the schema runs first and
gives the located, friendly errors, so a model error here means the two drifted
(a test keeps them in step). Durations and expressions stay as written; the
compiler turns them into a :class:`sealflow.dsl.plan.Plan`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sealflow.dsl.document import Pointer
from sealflow.dsl.kinds import StepKind

#: a step's kind keys, one per kind (:class:`~sealflow.dsl.kinds.StepKind`, in its order)
KIND_KEYS = tuple(k.value for k in StepKind)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class ActionInfo(_Model):
    """What the compiler knows of an action from its Python declaration."""

    name: str
    permissions: tuple[str, ...] = ()
    effect: Literal["read", "write", "irreversible"] = "read"
    #: False: the target cannot deduplicate by key (then an irreversible step needs none: C410)
    honours_idempotency_key: bool = True
    #: JSON Schema of its ``with:`` arguments (None: unknown, no argument is checked)
    input_schema: dict[str, Any] | None = None
    #: JSON Schema of what it returns (None: unknown, any field may be read)
    output_schema: dict[str, Any] | None = None
    #: the secrets it resolves into ``ctx.secrets`` (the configuration must provide them)
    secrets: tuple[str, ...] = ()
    #: where it is defined, ``path:line``
    source: str | None = None


class Backoff(_Model):
    initial: str = "1s"
    factor: float = 2
    max: str = "30s"
    jitter: Literal["full", "equal", "none"] = "full"


class RetryClass(_Model):
    on: list[str] = Field(default_factory=list)
    max_attempts: int = 1
    backoff: Backoff = Field(default_factory=Backoff)


class SchemaRef(_Model):
    ref: str = Field(alias="$ref")


SchemaOrRef = SchemaRef | dict[str, Any]


class Schedule(_Model):
    cron: str
    timezone: str = "UTC"
    run_as: str | None = None


class EventOrder(_Model):
    key: str
    sequence: str


class Event(_Model):
    type: str
    source: str | None = None
    filter: str | None = None
    run_as: str | None = None
    order: EventOrder | None = None


class Trigger(_Model):
    schedule: Schedule | None = None
    event: Event | None = None


class Input(_Model):
    schema_: SchemaOrRef | None = Field(default=None, alias="schema")


class Budget(_Model):
    max_steps: int | None = None
    max_runtime: str | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_tool_calls: int | None = None


class StepBudget(_Model):
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_tool_calls: int | None = None


class Defaults(_Model):
    timeout: str = "30s"
    retry: str | RetryClass | None = None


class ApprovalDefaults(_Model):
    approvers: list[str] = Field(default_factory=list)
    timeout: str = "24h"
    quorum: int = 1


class RunConcurrency(_Model):
    key: str
    limit: int = 1


class Prompt(_Model):
    id: str | None = None
    version: int | str | None = None
    template: str | None = None


class Ai(_Model):
    model: str
    fallback: list[str] = Field(default_factory=list)
    prompt: Prompt | None = None
    system: str | None = None
    output_schema: SchemaOrRef | None = None
    max_tokens: int | None = None
    temperature: float | None = None


class AgentApproval(_Model):
    approvers: list[str] | None = None
    quorum: int | None = None
    timeout: str | None = None
    separation_of_duties: bool = True


class McpTool(_Model):
    """An MCP tool an agent may call: ``SERVER/TOOL`` as locked, with the effect and permissions declared here."""

    tool: str
    effect: Literal["read", "write", "irreversible"]
    permissions: list[str] = Field(default_factory=list)


class Agent(_Model):
    model: str
    goal: str
    tools: list[str] = Field(default_factory=list)
    mcp_tools: list[McpTool] = Field(default_factory=list)
    max_steps: int
    max_tool_calls: int | None = None
    output_schema: SchemaOrRef | None = None
    system: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    approval_required: list[str] = Field(default_factory=list)
    approval: AgentApproval | None = None


class SwitchCase(_Model):
    when: str | None = None
    next: str


class TimeoutRoute(_Model):
    next: str


class Editable(_Model):
    schema_: SchemaOrRef = Field(alias="schema")


class Approval(_Model):
    approvers: list[str] | None = None
    quorum: int | None = None
    timeout: str | None = None
    on_timeout: Literal["reject"] | TimeoutRoute = "reject"
    show: str | None = None
    separation_of_duties: bool = True
    editable: Editable | None = None


class Wait(_Model):
    for_: str | None = Field(default=None, alias="for")
    until: str | None = None
    #: wait for an event of this type instead of a time (``source``, ``match`` and ``schema`` narrow it; ``timeout``
    #: bounds it)
    event: str | None = None
    source: str | None = None
    match: str | None = None
    schema_: SchemaOrRef | None = Field(default=None, alias="schema")
    timeout: str | None = None


class Callback(_Model):
    timeout: str
    schema_: SchemaOrRef | None = Field(default=None, alias="schema")


class Call(_Model):
    """``call:``: run another definition as a child run (found beside this one at compile time, pinned by digest)."""

    workflow: str
    version: int
    input: dict[str, Any] = Field(default_factory=dict)


class Fail(_Model):
    error: str = "internal"
    message: str = ""


class Succeed(_Model):
    output: Any = None


class Map(_Model):
    items: str
    concurrency: int
    max_items: int
    tolerate_failures: int | str = 0
    steps: list[Step]


class Branch(_Model):
    steps: list[Step]


class Parallel(_Model):
    branches: list[Branch]


class ValidateRule(_Model):
    check: str
    message: str | None = None


class ErrorRoute(_Model):
    errors: list[str]
    next: str


class Compensate(_Model):
    action: str
    with_: dict[str, Any] = Field(default_factory=dict, alias="with")
    timeout: str | None = None
    retry: str | RetryClass | None = None


class LintIgnore(_Model):
    ignore: list[str]
    reason: str | None = None


class Step(_Model):
    id: str
    # kinds: exactly one (the compiler checks, C403)
    action: str | None = None
    ai: Ai | None = None
    agent: Agent | None = None
    switch: list[SwitchCase] | None = None
    approval: Approval | None = None
    wait: Wait | None = None
    set: dict[str, Any] | None = None
    fail: Fail | None = None
    succeed: Succeed | None = None
    map: Map | None = None
    parallel: Parallel | None = None
    call: Call | None = None
    # common fields
    name: str | None = None
    description: str | None = None
    with_: dict[str, Any] = Field(default_factory=dict, alias="with")
    when: str | None = None
    timeout: str | None = None
    retry: str | RetryClass | None = None
    permissions: list[str] = Field(default_factory=list)
    reauthorize: bool | None = None
    idempotency_key: str | None = None
    validate_: list[str | ValidateRule] = Field(default_factory=list, alias="validate")
    requires_approval_if: str | None = None
    on_error: list[ErrorRoute] = Field(default_factory=list)
    compensate: Compensate | None = None
    concurrency: str | None = None
    lock: str | None = None
    circuit_breaker: str | None = None
    isolation: Literal["thread", "process"] | None = None
    budget: StepBudget | None = None
    callback: Callback | None = None
    next: str | None = None
    lint: LintIgnore | None = None

    def kinds(self) -> list[str]:
        return [k for k in KIND_KEYS if getattr(self, k) is not None]

    def subflows(self) -> list[tuple[Pointer, list[Step]]]:
        """The sub-flows of a fan-out step: (pointer below the step, steps); empty for other kinds."""
        if self.map is not None:
            return [(("map", "steps"), self.map.steps)]
        if self.parallel is not None:
            return [(("parallel", "branches", j, "steps"), b.steps) for j, b in enumerate(self.parallel.branches)]
        return []


class Definition(_Model):
    sealflow: int
    name: str
    version: int
    owner: str
    description: str | None = None
    trigger: Trigger | None = None
    input: Input | None = None
    permissions: list[str] = Field(default_factory=list)
    budget: Budget = Field(default_factory=Budget)
    defaults: Defaults = Field(default_factory=Defaults)
    retry: dict[str, RetryClass] = Field(default_factory=dict)
    approvals: ApprovalDefaults | None = None
    concurrency: RunConcurrency | None = None
    priority: Literal["critical", "high", "normal", "low"] = "normal"
    steps: list[Step]
    output: Any = None


Map.model_rebuild()
Branch.model_rebuild()
