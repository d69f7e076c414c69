"""Type checks of a definition against its input schema, its actions and its models (run by the compiler).

What each step's output holds is known from the actions' output schemas (their return annotations or
``@action(output_schema=...)``), an ``ai`` or ``agent`` step's ``output_schema``, a ``set`` step's keys and a
fan-out's list of results; what the input holds, from ``input.schema``. With them the compiler checks:

* ``with:`` (and a compensation's ``with:``) against the action's parameters: an unknown argument (C421), a
  missing required one (C422), a literal of the wrong type (C423), an expression whose type cannot fit (C424),
  and a value that may be null where the parameter does not take null (C425, a warning: wrap it in
  ``default()``);
* every path an expression reads: ``steps.X.output.F`` where X's output has no field F (X311), ``input.F`` where
  the input schema declares its properties and F is not one (X312);
* the models ``ai`` and ``agent`` steps name, against the configured ones (C426), when they are known;
* the secrets the actions declare, against what provides secrets here (C427, a warning; ``doctor`` fails).

Only what is known is checked: an action loaded without annotations, a schema Sealflow cannot read, a dynamic
index are "any value", and pass (:mod:`sealflow.dsl.jsontypes`).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from sealflow.dsl import jsontypes as jt
from sealflow.dsl.compile_fanout import all_model_steps
from sealflow.dsl.document import Pointer
from sealflow.dsl.errors import Diagnostic
from sealflow.dsl.expressions.errors import ExpressionError
from sealflow.dsl.expressions.infer import Roots, infer
from sealflow.dsl.expressions.static_check import step_sites, templates_in
from sealflow.dsl.expressions.templates import OPEN, parse_template
from sealflow.dsl.plan import Plan, PlanStep, walk

if TYPE_CHECKING:
    from sealflow.dsl.compiling import CompileContext
    from sealflow.dsl.expressions.expression import Expression
    from sealflow.dsl.mcp_lock import LockedTool
    from sealflow.dsl.model import ActionInfo, Step

    class Compiler(CompileContext, Protocol):
        """What the checks read of the compiler: the document, the definition, where diagnostics go, the actions."""

        actions: dict[str, ActionInfo] | None

@dataclasses.dataclass(frozen=True)
class ProjectFacts:
    """What the project around a definition provides, when known: the configured model names (None: not known,
    no model is checked), whether a secret name resolves here (None: not checked) and the pinned MCP tools."""

    models: frozenset[str] | None = None
    secret_known: Callable[[str], bool] | None = None
    #: the project's pinned MCP tools ("server/tool" -> entry; :mod:`sealflow.dsl.mcp_lock`); None: the nearest
    #: ``sealflow.mcp.lock`` in the definition's folder or above is read when the definition names an MCP tool
    mcp_lock: Mapping[str, LockedTool] | None = None


_RUN_TYPES = {"id": jt.STRING, "workflow": jt.STRING, "version": jt.INTEGER, "initiator": jt.STRING,
              "tenant": jt.STRING, "attempt": jt.INTEGER}


class TypeCheck:
    def __init__(self, compiler: Compiler, plan: Plan, *, models: Iterable[str] | None = None,
                 secret_known: Callable[[str], bool] | None = None):
        self.c = compiler
        self.plan = plan
        self.actions: dict[str, ActionInfo] = compiler.actions or {}
        self.models = set(models) if models is not None else None
        self.secret_known = secret_known
        self.plan_steps: dict[str, PlanStep] = {s.id: s for _, s in walk(plan.steps, ())}
        self.model_steps: dict[str, Step] = {s.id: s for _, s in all_model_steps(compiler.d.steps)}
        self.input = jt.from_schema(plan.input_schema) if plan.input_schema else jt.UNKNOWN
        self._outputs: dict[str, jt.Ty] = {}
        self._computing: set[str] = set()

    # -- what each step's output holds ------------------------------------------------------------
    def output_of(self, step_id: str) -> jt.Ty:
        if step_id in self._outputs:
            return self._outputs[step_id]
        if step_id in self._computing:  # a set step reading itself through a loop: any value
            return jt.UNKNOWN
        self._computing.add(step_id)
        try:
            ty = self._output(step_id)
        finally:
            self._computing.discard(step_id)
        step = self.model_steps.get(step_id)
        if step is not None and step.when is not None:
            ty = ty.or_null()  # skipped: its output is null
        self._outputs[step_id] = ty
        return ty

    def _output(self, step_id: str) -> jt.Ty:
        ps = self.plan_steps.get(step_id)
        if ps is None:
            return jt.UNKNOWN
        if ps.action is not None and str(ps.kind) == "action":
            info = self.actions.get(ps.action)
            return jt.from_schema(info.output_schema) if info is not None and info.output_schema else jt.UNKNOWN
        if ps.ai is not None:
            return jt.from_schema(ps.ai.output_schema) if ps.ai.output_schema else jt.UNKNOWN
        if ps.agent is not None:
            return jt.from_schema(ps.agent.output_schema) if ps.agent.output_schema else jt.UNKNOWN
        if ps.assign is not None:
            fields = {}
            for name, value in ps.assign.items():
                fields[name] = self.infer_expr(value, step_id) if isinstance(value, str) else jt.of_value(value)
            return jt.obj(fields)
        if ps.map is not None or ps.parallel is not None:
            return jt.array()
        return jt.UNKNOWN

    # -- expressions ------------------------------------------------------------------------------
    def roots(self, own: str | None, item: jt.Ty = jt.UNKNOWN) -> Roots:
        def root(name: str, keys: tuple[str | int, ...]) -> tuple[jt.Ty, int]:
            if name == "input":
                return self.input, 0
            if name == "steps":
                if len(keys) >= 2 and isinstance(keys[0], str):
                    if keys[1] == "output":
                        return self.output_of(keys[0]), 2
                    if keys[1] == "status":
                        return jt.STRING, 2
                return jt.UNKNOWN, len(keys)
            if name == "run":
                if keys and keys[0] in _RUN_TYPES:
                    return _RUN_TYPES[keys[0]], 1
                return jt.UNKNOWN, len(keys)
            if name == "output":
                return (self.output_of(own) if own is not None else jt.UNKNOWN), 0
            if name == "index":
                return jt.INTEGER, 0
            return item, 0
        return root

    def infer_expr(self, text: str, own: str | None) -> jt.Ty:
        return infer(text, self.roots(own))

    def infer_value(self, value: Any, own: str | None) -> jt.Ty:
        """The type of a ``with:`` value: a literal's own, a single template's expression's, text for any other
        template, a map or list of those."""
        if isinstance(value, str):
            if OPEN not in value:
                return jt.STRING
            try:
                template = parse_template(value)
            except ExpressionError:
                return jt.UNKNOWN
            if template.single:
                return infer(cast("tuple[Expression, int]", template.parts[0])[0].text, self.roots(own))
            return jt.STRING
        if isinstance(value, dict):
            return jt.obj({str(k): self.infer_value(v, own) for k, v in value.items()})
        if isinstance(value, list):
            return jt.array(jt.union(*(self.infer_value(v, own) for v in value)) if value else jt.UNKNOWN)
        return jt.of_value(value)

    # -- the checks -------------------------------------------------------------------------------
    def run(self) -> None:
        for p, step in all_model_steps(self.c.d.steps):
            self.paths(p, step)
            if step.action is not None:
                self.arguments(p, step.id, step.action, step.with_, p)
            if step.compensate is not None:
                self.arguments(p + ("compensate",), step.id, step.compensate.action, step.compensate.with_, p)
            self.models_of(p, step)
            if step.action is not None:
                self.secrets_of(p, step.action)
        for pointer, text in templates_in(self.c.d.output, ("output",)):
            self.paths_in(pointer, "template", text, None)

    def paths(self, p: Pointer, step: Step) -> None:
        for pointer, kind, text, _self, _output in step_sites(step, p):
            self.paths_in(pointer, kind, text, step.id)
        if step.map is not None:
            self.paths_in(p + ("map", "items"), "expr", step.map.items, step.id)

    def paths_in(self, pointer: Pointer, kind: str, text: str, own: str | None) -> None:
        from sealflow.dsl.expressions.expression import compile_cached

        try:
            parts = [(compile_cached(text), 0)] if kind == "expr" else parse_template(text).expressions()
        except ExpressionError:
            return  # reported by the expression checks
        roots = self.roots(own)
        for expr, base in parts:
            for ref in expr.references():
                if ref.root not in ("input", "steps", "output") or not ref.at:
                    continue
                ty, used = roots(ref.root, ref.path)
                if ref.root == "steps" and (len(ref.path) < 2 or ref.path[1] != "output"):
                    continue
                for i in range(used, len(ref.path)):
                    before = ty
                    ty, missing = jt.field(ty, ref.path[i])
                    if missing:
                        self._unknown_field(pointer, base + ref.at[i], ref, i, before)
                        break

    def _unknown_field(self, pointer: Pointer, offset: int, ref: Any, i: int, holder: jt.Ty) -> None:
        key = ref.path[i]
        known = sorted(holder.fields or {})
        shown = ref.root + "".join(f".{k}" if isinstance(k, str) else f"[{k}]" for k in ref.path[:i])
        if "object" not in holder.kinds:  # a list: one result per item of a map, per branch of a parallel
            code = "X312" if ref.root == "input" else "X311"
            self.c.diagnostics.append(Diagnostic(
                code, f"{shown} is a list, which has no field '{key}'",
                self.c.doc.locate_in_string(pointer, offset), hint=f"index it first: {shown}[0].{key}",
                pointer="/".join(str(x) for x in pointer)))
            return
        guess = difflib.get_close_matches(str(key), known, n=1)
        listing = ("it has: " + ", ".join(known)) if known else "it has no fields"
        hint = (f"did you mean {shown}.{guess[0]}? " if guess else "") + listing
        if ref.root == "input" and i == 0:
            code, what = "X312", f"the input has no field '{key}' (input.schema declares its properties)"
        elif ref.root == "steps" and i == 2:
            code, what = "X311", f"the output of step '{ref.path[0]}' has no field '{key}'"
            hint += f" ({self._output_source(ref.path[0])})"
        else:
            code = "X312" if ref.root == "input" else "X311"
            what = f"{shown} has no field '{key}'"
        self.c.diagnostics.append(Diagnostic(code, what, self.c.doc.locate_in_string(pointer, offset), hint=hint,
                                             pointer="/".join(str(x) for x in pointer)))

    def _output_source(self, step_id: str) -> str:
        ps = self.plan_steps.get(step_id)
        if ps is None:
            return "its output"
        if ps.action is not None and str(ps.kind) == "action":
            info = self.actions.get(ps.action)
            where = f" at {info.source}" if info is not None and info.source else ""
            return f"the output schema of action {ps.action}{where}"
        if ps.assign is not None:
            return "the keys of its set:"
        return "its output_schema"

    def arguments(self, p: Pointer, step_id: str, action: str, given: dict[str, Any], step_p: Pointer) -> None:
        info = self.actions.get(action)
        schema = info.input_schema if info is not None else None
        if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
            return
        params: dict[str, Any] = schema["properties"]
        open_ = schema.get("additionalProperties", True) is not False
        names = sorted(params)
        where = f" (defined at {info.source})" if info is not None and info.source else ""
        for name in given:
            if name not in params and not open_:
                guess = difflib.get_close_matches(str(name), names, n=1)
                hint = (f"did you mean '{guess[0]}'? " if guess else "") + (
                    f"{action} takes: {', '.join(names)}" if names else f"{action} takes no arguments")
                self.c.error("C421", f"action {action} has no parameter '{name}'{where}", p + ("with", name), hint,
                             key=True)
        missing = [r for r in schema.get("required") or () if r not in given]
        if missing:
            at = p + ("with",) if given else p + ("action",)
            self.c.error("C422", f"action {action} needs the argument{'s' * (len(missing) > 1)} "
                         f"{', '.join(repr(m) for m in missing)}, which with: does not give{where}", at,
                         "add " + ", ".join(f"{m}: ..." for m in missing) + " under with:")
        for name, value in given.items():
            if name in params:
                self.argument(p + ("with", name), action, str(name), params[name], value, step_id)

    def argument(self, pointer: Pointer, action: str, name: str, schema: Any, value: Any, own: str) -> None:
        target = jt.from_schema(schema)
        if target.unknown:
            return
        if not _has_template(value):
            problem = _literal_problem(schema, value)
            if problem is not None:
                self.c.error("C423", f"argument '{name}' of {action} takes {target.describe()}: {problem}", pointer,
                             f"write a value of type {target.describe()}")
            return
        got = self.infer_value(value, own)
        shown = value if isinstance(value, str) else "this value"
        if not jt.overlap(got, target):
            self.c.error("C424", f"argument '{name}' of {action} takes {target.describe()}, but {shown} is "
                         f"{got.describe()}", pointer, _convert_hint(target))
        elif jt.may_break_null(got, target):
            self.c.diagnostics.append(Diagnostic(
                "C425", f"argument '{name}' of {action} does not take null, but {shown} may be null (an optional "
                f"field, or a step that may not have run); at run time a null fails the step (invalid_request)",
                self.c.doc.locate(pointer), severity="warning",
                hint="give a fallback: ${{ default(<expression>, <value>) }}, or require the field in the schema",
                pointer="/".join(str(x) for x in pointer)))

    def models_of(self, p: Pointer, step: Step) -> None:
        if self.models is None:
            return
        named: list[tuple[Pointer, str]] = []
        if step.ai is not None:
            named.append((p + ("ai", "model"), step.ai.model))
            named += [(p + ("ai", "fallback", i), m) for i, m in enumerate(step.ai.fallback)]
        if step.agent is not None:
            named.append((p + ("agent", "model"), step.agent.model))
        known = sorted(self.models)
        for pointer, model in named:
            if model not in self.models:
                guess = difflib.get_close_matches(model, known, n=1)
                self.c.error("C426", f"model '{model}' is not configured (configured: {', '.join(known)})", pointer,
                             (f"did you mean '{guess[0]}'? " if guess else "")
                             + "define it under models: in sealflow.yaml or the runtime configuration "
                               "(docs/models.md)")

    def secrets_of(self, p: Pointer, action: str) -> None:
        info = self.actions.get(action)
        if self.secret_known is None or info is None:
            return
        for name in info.secrets:
            if not self.secret_known(name):
                self.c.diagnostics.append(Diagnostic(
                    "C427", f"action {action} needs the secret '{name}', which nothing here provides",
                    self.c.doc.locate(p + ("action",)), severity="warning",
                    hint=f"set SEALFLOW_SECRET_{_env(name)} or put a file '{name}' in the secrets directory "
                         "(secrets.dir, SEALFLOW_SECRETS_DIR) where the runtime runs; sealflow doctor checks it",
                    pointer="/".join(str(x) for x in p + ("action",))))


def _has_template(value: Any) -> bool:
    if isinstance(value, str):
        return OPEN in value
    if isinstance(value, dict):
        return any(_has_template(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_template(v) for v in value)
    return False


def _literal_problem(schema: Any, value: Any) -> str | None:
    import jsonschema

    try:
        validator = jsonschema.Draft202012Validator(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except (jsonschema.SchemaError, TypeError, ValueError, RecursionError):
        return None
    if error is None:
        return None
    at = jt.subscripts(error.absolute_path)
    message: str = error.message
    return (f"at {at}: " if at else "") + message[:300]


def _convert_hint(target: jt.Ty) -> str:
    if target.kinds <= {"string", "null"}:
        return "convert it: ${{ str(<expression>) }}"
    if target.kinds <= {"integer", "number", "null"}:
        return "convert it: ${{ int(<expression>) }} or ${{ float(<expression>) }}"
    return f"pass a value of type {target.describe()}"


def _env(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()
