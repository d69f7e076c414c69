"""Every field is described alike in the schema, the definition model and the plan.

``schemas/workflow.schema.json`` (what an author may write), :mod:`sealflow.dsl.model` (the
definition as authored) and :mod:`sealflow.dsl.plan` (what the runtime executes) describe the
same fields three times. :data:`ROWS` ties each schema object to its model class and its plan
class; where they legitimately differ, the row says how (a duration ``timeout`` becomes
``timeout_ms``, ``defaults`` is applied to the steps and gone). A field added to one of the three
and not to the others fails here, naming the row and the field.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any

import pytest
from pydantic import BaseModel

from sealflow import schemas
from sealflow.dsl import model as m
from sealflow.dsl import plan as p


@dataclasses.dataclass(frozen=True)
class Row:
    """One object described three times: ``schema`` is a pointer (``#`` or ``#/$defs/x``)."""

    schema: str | None
    model: type[BaseModel] | None
    plan: type[BaseModel] | None
    #: model field -> plan field(s) of another name (or several: a map flattened into the parent)
    renamed: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    #: model fields the compiler consumes (applied elsewhere, or only checked): field -> why
    compiled_away: dict[str, str] = dataclasses.field(default_factory=dict)
    #: plan fields the compiler derives, with no field in the definition: field -> why
    derived: dict[str, str] = dataclasses.field(default_factory=dict)

    def __str__(self) -> str:
        return " / ".join(x if isinstance(x, str) else x.__name__ for x in (self.schema, self.model, self.plan) if x)


DURATION = "a duration becomes milliseconds"
ROWS = [
    Row("#", m.Definition, p.Plan,
        renamed={"sealflow": ("language",), "input": ("input_schema",)},
        compiled_away={"defaults": "applied to every step", "retry": "named classes inlined into each step",
                       "approvals": "the defaults of each approval gate"},
        derived={"format": "the plan format", "start": "the first step", "digest": "content address",
                 "actions": "action metadata from code"}),
    Row("#/$defs/trigger", m.Trigger, p.TriggerPlan),
    Row("#/$defs/schedule", m.Schedule, None),
    Row("#/$defs/event", m.Event, None),
    Row("#/$defs/eventOrder", m.EventOrder, None),
    Row("#/$defs/input", m.Input, None),
    Row("#/$defs/schemaRef", m.SchemaRef, None),
    Row("#/$defs/budget", m.Budget, p.BudgetPlan, renamed={"max_runtime": ("max_runtime_ms",)}),
    Row("#/$defs/stepBudget", m.StepBudget, p.StepBudgetPlan),
    Row("#/$defs/defaults", m.Defaults, None),
    Row("#/$defs/approvalDefaults", m.ApprovalDefaults, None),
    Row("#/$defs/runConcurrency", m.RunConcurrency, None),
    Row("#/$defs/backoff", m.Backoff, None),
    Row("#/$defs/retryClass", m.RetryClass, p.RetryPolicy,
        renamed={"backoff": ("initial_ms", "factor", "max_ms", "jitter")},
        derived={"name": "the retry class's name, when it had one"}),
    Row("#/$defs/prompt", m.Prompt, None),
    Row("#/$defs/ai", m.Ai, p.AiPlan, renamed={"prompt": ("prompt_template", "prompt_ref")}),
    Row("#/$defs/agent", m.Agent, p.AgentPlan),
    Row("#/$defs/mcpTool", m.McpTool, p.McpToolPlan,
        derived={"server": "from SERVER/TOOL", "name": "what the model sees: mcp.SERVER.TOOL",
                 "description": "locked (sealflow.mcp.lock)", "input_schema": "locked",
                 "description_digest": "locked", "input_schema_digest": "locked", "output_schema_digest": "locked"}),
    Row("#/$defs/agentApproval", m.AgentApproval, p.ApprovalPlan, renamed={"timeout": ("timeout_ms",)},
        derived={"implicit": "the gate of requires_approval_if", "on_timeout": "a tool call's timeout rejects",
                 "show": "the proposed tool call", "editable_schema": "a tool call is approved as proposed"}),
    Row("#/$defs/switchBranch", m.SwitchCase, p.SwitchCasePlan),
    Row("#/$defs/onTimeout", m.TimeoutRoute, None),
    Row("#/$defs/approval", m.Approval, p.ApprovalPlan,
        renamed={"timeout": ("timeout_ms",), "editable": ("editable_schema",)},
        derived={"implicit": "the gate of requires_approval_if"}),
    Row("#/$defs/editable", m.Editable, None),
    Row("#/$defs/wait", m.Wait, p.WaitPlan,
        renamed={"for": ("for_ms",), "schema": ("event_schema",), "timeout": ("timeout_ms",)}),
    Row("#/$defs/fail", m.Fail, p.FailPlan),
    Row("#/$defs/callback", m.Callback, p.CallbackPlan,
        renamed={"schema": ("result_schema",), "timeout": ("timeout_ms",)}),
    Row("#/$defs/succeed", m.Succeed, None),
    Row("#/$defs/map", m.Map, p.MapPlan, renamed={"tolerate_failures": ("tolerate_failures", "tolerate_percent")},
        derived={"start": "the sub-flow's first step"}),
    Row("#/$defs/branch", m.Branch, p.BranchPlan, derived={"start": "the sub-flow's first step"}),
    Row("#/$defs/parallel", m.Parallel, p.ParallelPlan),
    Row("#/$defs/call", m.Call, p.CallPlan,
        derived={"digest": "the called plan's digest (pinned)", "plan": "the called workflow, compiled"}),
    Row("#/$defs/validateRule", m.ValidateRule, p.ValidateRulePlan),
    Row("#/$defs/onErrorRoute", m.ErrorRoute, p.ErrorRoutePlan),
    Row("#/$defs/compensate", m.Compensate, p.CompensationPlan,
        renamed={"with": ("args",), "timeout": ("timeout_ms",)}),
    Row("#/$defs/lint", m.LintIgnore, None),
    Row("#/$defs/step", m.Step, p.PlanStep,
        renamed={"set": ("assign",), "succeed": ("succeed_output",), "with": ("args",), "timeout": ("timeout_ms",),
                 "validate": ("validations",)},
        compiled_away={"name": "for authors and editors only", "description": "for authors and editors only",
                       "lint": "read by the linter"},
        derived={"index": "the position in steps", "kind": "which kind key is set", "edges": "control flow",
                 "gate": "the approval of requires_approval_if"}),
    # not in the schema: what code declares of an action, and what control flow derives
    Row(None, m.ActionInfo, p.ActionMeta, compiled_away={
        "name": "the key of Plan.actions",
        "input_schema": "checked at compile time (dsl/typecheck.py) and again at run time from the action itself",
        "output_schema": "checked at compile time (dsl/typecheck.py) and again at run time from the action itself",
        "secrets": "checked at validate (C427) and by doctor; resolved at run time from the action itself",
        "source": "where the action is defined, for messages only"}),
    Row(None, None, p.Edge, derived={"kind": "control flow", "target": "control flow", "label": "control flow"}),
]
#: schema objects that are branches of a row's object (``prompt`` is one of two forms)
BRANCHES = {"#/$defs/promptFile": "#/$defs/prompt", "#/$defs/promptInline": "#/$defs/prompt"}

ROOT = schemas.load()
BY_MODEL = {row.model: row for row in ROWS if row.model}
BY_SCHEMA = {row.schema: row for row in ROWS if row.schema}


def _node(pointer: str) -> dict:
    node: Any = ROOT
    for part in pointer.lstrip("#/").split("/") if pointer != "#" else []:
        node = node[part]
    return node


def schema_fields(pointer: str) -> set[str]:
    """The properties of a schema object, with those of its ``anyOf``/``oneOf`` forms."""
    node, found = _node(pointer), set()
    stack = [node]
    while stack:
        n = stack.pop()
        if not isinstance(n, dict):
            continue
        if "$ref" in n and n is not node:
            stack.append(_node(n["$ref"]))
        found |= set(n.get("properties", {}))
        stack.extend(n.get("anyOf", []) + n.get("oneOf", []))
    return found


def schema_objects(node: Any) -> set[str]:
    """The row objects a schema value can hold: follows references, forms, items and map values."""
    found: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if not isinstance(n, dict):
            continue
        ref = n.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            if ref in BY_SCHEMA:
                found.add(ref)
            else:
                stack.append(_node(ref))
        for key in ("anyOf", "oneOf", "allOf"):
            stack.extend(n.get(key, []))
        for key in ("items", "additionalProperties", "then", "else"):
            stack.append(n.get(key))
    return found


def model_fields(cls: type[BaseModel]) -> dict[str, Any]:
    """Fields as written in YAML (the alias where there is one) -> annotation."""
    return {(f.alias or name): f.annotation for name, f in cls.model_fields.items()}


def p_fields(row: Row) -> dict[str, Any]:
    """The plan class's fields -> annotation."""
    return {name: f.annotation for name, f in row.plan.model_fields.items()} if row.plan else {}


def classes_in(annotation: Any) -> set[type]:
    """The pydantic classes an annotation can hold (inside unions, lists, tuples, maps)."""
    found, stack = set(), [annotation]
    while stack:
        a = stack.pop()
        if inspect.isclass(a) and issubclass(a, BaseModel):
            found.add(a)
        stack.extend(typing.get_args(a))
    return found


def classes_of(module) -> set[type]:
    return {c for c in vars(module).values()
            if inspect.isclass(c) and issubclass(c, BaseModel) and c.__module__ == module.__name__
            and not c.__name__.startswith("_")}


# ---------------------------------------------------------------- the table is complete

def test_every_class_and_schema_object_has_a_row():
    # Given the three descriptions, Then every model class, plan class and schema object is in ROWS.
    assert classes_of(m) - set(BY_MODEL) == set(), "model classes without a row"
    assert classes_of(p) - {row.plan for row in ROWS} == set(), "plan classes without a row"
    objects = {f"#/$defs/{name}" for name, d in ROOT["$defs"].items() if "properties" in d}
    assert objects - set(BY_SCHEMA) - set(BRANCHES) == set(), "schema objects without a row"


def test_the_rows_speak_of_fields_that_exist():
    for row in ROWS:
        have = set(model_fields(row.model)) if row.model else set()
        assert set(row.renamed) | set(row.compiled_away) <= have, f"{row}: rows name unknown model fields"
        assert set(row.derived) <= set(p_fields(row)), f"{row}: rows name unknown plan fields"


# ---------------------------------------------------------------- schema <-> model

@pytest.mark.parametrize("row", [r for r in ROWS if r.schema and r.model], ids=str)
def test_schema_and_model_have_the_same_fields(row):
    # Given a schema object and its model class, Then they list the same fields (YAML names).
    in_schema, in_model = schema_fields(row.schema), set(model_fields(row.model))
    assert in_schema - in_model == set(), f"{row}: in the schema, not in the model"
    assert in_model - in_schema == set(), f"{row}: in the model, not in the schema"


@pytest.mark.parametrize("row", [r for r in ROWS if r.schema and r.model], ids=str)
def test_schema_and_model_nest_the_same_objects(row):
    # Given a field holding an object, Then the schema refers to the row of the model's class.
    properties = {}
    for pointer in [row.schema] + [b for b, parent in BRANCHES.items() if parent == row.schema]:
        stack = [_node(pointer)]
        while stack:
            n = stack.pop()
            properties.update(n.get("properties", {}))
            stack.extend(x for x in n.get("anyOf", []) + n.get("oneOf", []) if isinstance(x, dict))
    for name, annotation in model_fields(row.model).items():
        if name not in properties:
            continue  # the test of fields reports it
        expected = {BY_MODEL[c].schema for c in classes_in(annotation)}
        assert schema_objects(properties[name]) == expected, f"{row}: field {name!r} holds different objects"


# ---------------------------------------------------------------- model <-> plan

@pytest.mark.parametrize("row", [r for r in ROWS if r.plan], ids=str)
def test_model_and_plan_have_the_same_fields_or_say_why_not(row):
    # Given a model class and its plan class, Then every field of one is the other's, under its
    # own name or the row's renaming, or the row says why it is compiled away or derived.
    have = set(model_fields(row.model)) if row.model else set()
    mapped = {t for f in have - set(row.compiled_away) for t in row.renamed.get(f, (f,))}
    in_plan = set(p_fields(row))
    assert mapped - in_plan == set(), f"{row}: definition fields missing from the plan (rename or compile away?)"
    assert in_plan - mapped - set(row.derived) == set(), f"{row}: plan fields from nowhere (derived? say why)"


@pytest.mark.parametrize("row", [r for r in ROWS if r.plan and r.model], ids=str)
def test_model_and_plan_nest_the_same_objects(row):
    # Given a field holding an object, Then the plan holds the plan class of the model's class.
    plan = p_fields(row)
    for name, annotation in model_fields(row.model).items():
        if name in row.compiled_away:
            continue
        expected = {BY_MODEL[c].plan for c in classes_in(annotation) if BY_MODEL[c].plan}
        held = {c for target in row.renamed.get(name, (name,)) if target in plan for c in classes_in(plan[target])}
        assert held == expected, f"{row}: field {name!r} holds {held} in the plan, expected {expected}"
