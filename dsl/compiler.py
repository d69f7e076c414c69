"""Definition -> Plan: defaults applied, retry classes inlined, durations in ms, edges explicit.

The compiler collects every error it finds (it never stops at the first) and
returns a :class:`Plan` only when there are none. Expression checks live in
:mod:`sealflow.dsl.expressions.static_check`; control-flow analysis in :mod:`sealflow.dsl.graph`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

from sealflow.dsl import graph
from sealflow.dsl.compile_call import CallKinds
from sealflow.dsl.compile_fanout import FanOutKinds, all_model_steps, nested_fanout
from sealflow.dsl.compile_steps import StepKinds
from sealflow.dsl.document import Pointer
from sealflow.dsl.durations import DurationError, parse_ms
from sealflow.dsl.errors import Diagnostic
from sealflow.dsl.expressions import static_check as exprcheck
from sealflow.dsl.kinds import traits_of
from sealflow.dsl.limits import (  # noqa: F401 - re-exported: the caps are part of the compiler's contract
    AGENT_MAX_STEPS,
    APPROVAL_TIMEOUT_MAX,
    BACKOFF_FACTOR,
    BACKOFF_MAX_MS,
    CAPS,
    MAX_ATTEMPTS,
    NEVER_RETRYABLE,
    QUORUM_MAX,
    RUNTIME_MAX,
    STEP_TIMEOUT_MS,
    WAIT_FOR_MAX,
)
from sealflow.dsl.loader import Document
from sealflow.dsl.model import (
    KIND_KEYS,
    ActionInfo,
    Definition,
    RetryClass,
    Step,
)
from sealflow.dsl.plan import (
    END,
    ActionMeta,
    BudgetPlan,
    CallbackPlan,
    CompensationPlan,
    Edge,
    ErrorRoutePlan,
    FailPlan,
    Plan,
    PlanStep,
    RetryPolicy,
    StepBudgetPlan,
    TriggerPlan,
    ValidateRulePlan,
)
from sealflow.dsl.refs import SchemaResolver
from sealflow.dsl.typecheck import ProjectFacts, TypeCheck

_FILE_NAME = re.compile(r"^(?P<name>.+)\.v(?P<version>[0-9]+)\.ya?ml$")


class FlowIds(Sequence[str]):
    """The step ids of one flow, in order, asked whether they hold an id in constant time (a ``next``, switch,
    ``on_error`` or ``on_timeout`` target is looked up once per reference)."""

    __slots__ = ("_order", "_members")

    def __init__(self, ids: Iterable[str]):
        self._order = tuple(ids)
        self._members = frozenset(self._order)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...

    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        return self._order[i]

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __contains__(self, step: object) -> bool:
        return step in self._members


class Compiler(StepKinds, FanOutKinds, CallKinds):
    def __init__(self, doc: Document, definition: Definition, *, actions: dict[str, ActionInfo] | None = None,
                 root: Path | None = None, facts: ProjectFacts | None = None,
                 check_called: Callable[[bytes, str], Any] | None = None):
        self.doc = doc
        #: compiles a workflow a ``call`` names (dsl.api.check_bytes with this compile's settings; None: no calls)
        self.check_called = check_called
        self.d = definition
        self.actions = actions
        self.facts = facts or ProjectFacts()
        #: the folder referenced files are read from, when the caller named one (stored signed bytes: their refs)
        self.root = root
        self.resolver = SchemaResolver(doc, root)
        self.diagnostics: list[Diagnostic] = []

    # -- reporting ---------------------------------------------------------------------------------
    def error(self, code: str, message: str, pointer: Pointer, hint: str | None = None, *, key: bool = False) -> None:
        self.diagnostics.append(
            Diagnostic(code, message, self.doc.locate(pointer, key=key), hint=hint,
                       pointer="/".join(str(p) for p in pointer))
        )

    def duration(self, text: str | None, pointer: Pointer, lo: int, hi: int, what: str) -> int | None:
        if text is None:
            return None
        try:
            ms = parse_ms(text)
        except DurationError as exc:
            self.error("C409", str(exc), pointer, "use a number and a unit: ms, s, m, h or d")
            return None
        if not lo <= ms <= hi:
            from sealflow.dsl.durations import format_ms

            self.error("C408", f"{what} {text} is outside the allowed range {format_ms(lo)}..{format_ms(hi)}",
                       pointer, f"use a value between {format_ms(lo)} and {format_ms(hi)}")
            return None
        return ms

    # -- retry -------------------------------------------------------------------------------------
    def retry_policy(self, spec: str | RetryClass | None, pointer: Pointer) -> RetryPolicy:
        if spec is None:
            return RetryPolicy(name=None)
        if isinstance(spec, str):
            if spec not in self.d.retry:
                known = ", ".join(sorted(self.d.retry)) or "none declared"
                self.error("C412", f"unknown retry class {spec!r} (declared: {known})", pointer,
                           "declare it under the top-level 'retry:' or use an inline class")
                return RetryPolicy(name=spec)
            return self._policy(self.d.retry[spec], ("retry", spec), spec)
        return self._policy(spec, pointer, None)

    def _policy(self, rc: RetryClass, pointer: Pointer, name: str | None) -> RetryPolicy:
        key = (pointer, name)
        if key not in self._policies:
            self._policies[key] = self._build_policy(rc, pointer, name)
        return self._policies[key]

    def _build_policy(self, rc: RetryClass, pointer: Pointer, name: str | None) -> RetryPolicy:
        for i, cls in enumerate(rc.on):
            if cls in NEVER_RETRYABLE:
                self.error("C407", f"retry class lists {cls!r}, which is never retried", pointer + ("on", i),
                           f"remove {cls!r}: a retry cannot fix it; route it with on_error instead")
        if not 1 <= rc.max_attempts <= MAX_ATTEMPTS:
            self.error("C408", f"max_attempts {rc.max_attempts} is outside 1..{MAX_ATTEMPTS}",
                       pointer + ("max_attempts",), f"use at most {MAX_ATTEMPTS} attempts (the first included)")
        bp = pointer + ("backoff",)
        initial = self.duration(rc.backoff.initial, bp + ("initial",), 0, BACKOFF_MAX_MS, "backoff.initial") or 0
        maximum = self.duration(rc.backoff.max, bp + ("max",), 0, BACKOFF_MAX_MS, "backoff.max") or 0
        if not BACKOFF_FACTOR[0] <= rc.backoff.factor <= BACKOFF_FACTOR[1]:
            self.error("C408", f"backoff.factor {rc.backoff.factor} is outside 1..10", bp + ("factor",))
        return RetryPolicy(name=name, on=tuple(rc.on), max_attempts=rc.max_attempts, initial_ms=initial,
                           factor=float(rc.backoff.factor), max_ms=max(maximum, initial), jitter=rc.backoff.jitter)

    # -- the whole definition -----------------------------------------------------------------------
    def compile(self) -> Plan | None:
        d = self._definition_checks()
        self._policies: dict[tuple[Pointer, str | None], RetryPolicy] = {}
        for name in self.d.retry:
            self.retry_policy(name, ("retry", name))
        self.default_retry = self.retry_policy(self.d.defaults.retry, ("defaults", "retry"))
        self.default_timeout = self.duration(self.d.defaults.timeout, ("defaults", "timeout"), *STEP_TIMEOUT_MS,
                                             "defaults.timeout") or 30_000
        compiled = self._flow(self.d.steps, ())
        if any(s is None for s in compiled):
            return None
        steps = [s for s in compiled if s is not None]
        plan = Plan(
            name=self.d.name, version=self.d.version, owner=self.d.owner, description=self.d.description,
            trigger=self._trigger(), input_schema=self._input_schema(), permissions=tuple(self.d.permissions),
            budget=self._budget(), concurrency=self.d.concurrency.model_dump() if self.d.concurrency else None,
            priority=self.d.priority, start=self.d.steps[0].id, steps=tuple(steps), output=self.d.output,
            actions=self._action_meta(),
        )
        self._flow_checks(plan)
        exprcheck.check_plan(self, plan)
        TypeCheck(self, plan, models=self.facts.models, secret_known=self.facts.secret_known).run()
        if any(x.severity == "error" for x in self.diagnostics) or d:
            return None
        return self._digested(plan)

    def _digested(self, plan: Plan) -> Plan | None:
        """The plan with its digest, or a located error for a number RFC 8785 cannot hold exactly."""
        import rfc8785

        try:
            return plan.with_digest()
        except rfc8785.CanonicalizationError as exc:
            pointer, value = _first_unsafe_number(self.doc.data) or ((), None)
            shown = f"number {value!r} is" if value is not None else "a number is"
            self.error("S205", f"{shown} used as a whole number beyond ±(2^53 - 1), which the plan's canonical JSON "
                       f"cannot hold exactly ({exc})", pointer, "use a smaller number")
            return None

    def _definition_checks(self) -> bool:
        failed = False
        seen: dict[str, str] = {}
        for p, s in all_model_steps(self.d.steps):
            where = _where(p)
            if s.id in seen:
                self.error("C402", f"duplicate step id {s.id!r} (first at {seen[s.id]})", p + ("id",),
                           "give every step a unique id (the steps of a map or parallel too)")
                failed = True
            seen.setdefault(s.id, where)
            kinds = s.kinds()
            if len(kinds) != 1:
                failed = True
                if kinds:
                    self.error("C403", f"step {s.id!r} has {len(kinds)} kind keys ({', '.join(kinds)}); a step has "
                               "exactly one", p + (kinds[1],), "split it into two steps", key=True)
                else:
                    self.error("C403", f"step {s.id!r} has no kind key", p, "add one of: " + ", ".join(KIND_KEYS))
        for p, sid, inside in nested_fanout(self.d.steps, ()):
            failed = True
            if p[-1] == "call":
                self.error("C419", f"step {sid!r} calls a workflow inside {inside!r}, which fans out; a call does "
                           "not sit in a map or parallel sub-flow", p, key=True,
                           hint="call one workflow that maps over the items instead")
                continue
            self.error("C419", f"step {sid!r} fans out inside {inside!r}, which already fans out; fan-out does not "
                       "nest (the product of two bounds is no declared bound)", p, key=True,
                       hint="map over one flat list (built by the step before), or fan out again in a later step")
        self._file_name_check()
        return failed

    def _file_name_check(self) -> None:
        p = Path(self.doc.path)
        m = _FILE_NAME.match(p.name)
        if m is None and p.parent.name != "definitions":
            return
        expected = f"{self.d.name}.v{self.d.version}.yaml"
        if m is None or m.group("name") != self.d.name or int(m.group("version")) != self.d.version:
            self.error("C415", f"file is named {p.name!r} but holds {self.d.name} version {self.d.version}",
                       ("name",), f"rename the file to {expected!r}")

    # -- steps -------------------------------------------------------------------------------------
    def _flow(self, steps: list[Step], base: Pointer) -> list[PlanStep | None]:
        """The plan steps of one flow (the workflow's, or a sub-flow's under ``base``)."""
        ids = FlowIds(s.id for s in steps)
        return [self._step(i, s, ids, base) for i, s in enumerate(steps)]

    def _step(self, i: int, s: Step, ids: Sequence[str], base: Pointer = ()) -> PlanStep | None:
        kinds = s.kinds()
        if len(kinds) != 1:
            return None
        kind = kinds[0]
        p = base + ("steps", i)
        fall = ids[i + 1] if i + 1 < len(ids) else END
        nxt = s.next or fall
        if s.next is not None:
            self._target(s.next, p + ("next",), ids)
        if traits_of(kind).terminal and s.next is not None:
            self.error("C418", f"step {s.id!r} ends the run; 'next' has no effect", p + ("next",), key=True,
                       hint="remove 'next'")
        for j, perm in enumerate(s.permissions):
            if perm not in self.d.permissions:
                self.error("C406", f"step {s.id!r} needs permission {perm!r}, which the workflow does not declare",
                           p + ("permissions", j), f"add {perm!r} to the top-level permissions, for review")
        timeout = self.duration(s.timeout, p + ("timeout",), *STEP_TIMEOUT_MS, "timeout") if s.timeout else None
        retry = self.retry_policy(s.retry, p + ("retry",)) if s.retry is not None else self.default_retry
        if s.retry is not None and s.wait is not None and s.wait.event is not None:
            self.error("C418", f"step {s.id!r} waits for an event: it is not retried (its timeout is its bound, and "
                               "a retry would wait again for an event that did not come)", p + ("retry",),
                       "wait longer with a longer wait.timeout, and route the timeout with on_error")
        self._replay_check(s, kind, retry, p)
        fields: dict[str, Any] = {}
        edges: list[Edge] = []
        # Exactly one kind's field is set (kinds() above), so each test below picks out `kind`.
        if s.action is not None:
            fields.update(self._action(s, s.action, p))
        elif s.ai is not None:
            fields["ai"] = self._ai(s.ai, p)
        elif s.agent is not None:
            fields["agent"] = self._agent(s, s.agent, p)
        elif s.switch is not None:
            fields["switch"], edges = self._switch(s, s.switch, p, ids, nxt)
        elif s.approval is not None:
            fields["approval"] = self._approval(s.approval, p + ("approval",), ids)
            if fields["approval"] and fields["approval"].on_timeout != "reject":
                edges.append(Edge(kind="timeout", target=fields["approval"].on_timeout))
        elif s.wait is not None:
            fields["wait"] = self._wait(s.wait, p)
        elif s.set is not None:
            fields["assign"] = dict(s.set)
        elif s.fail is not None:
            fields["fail"] = FailPlan(error=s.fail.error, message=s.fail.message)
        elif s.succeed is not None:
            fields["succeed_output"] = s.succeed.output
        elif s.call is not None:
            call = self._call(s, p)
            if call is None:
                return None
            fields["call"] = call
        else:  # map, parallel
            fanout = self._fanout(s, kind, p)
            if fanout is None:
                return None
            fields.update(fanout)
        if traits_of(kind).follows_next:
            edges.insert(0, Edge(kind="next", target=nxt))
        if s.when is not None and not traits_of(kind).follows_next:
            edges.append(Edge(kind="skip", target=nxt))
        for j, route in enumerate(s.on_error):
            self._target(route.next, p + ("on_error", j, "next"), ids)
            edges.append(Edge(kind="error", target=route.next, label=",".join(route.errors)))
        gate = None
        if s.requires_approval_if is not None:
            gate = self._approval(None, p + ("requires_approval_if",), ids, implicit=True)
            if gate is not None and base:
                self.error("C418", "requires_approval_if is not supported inside a map or parallel sub-flow",
                           p + ("requires_approval_if",), "use an approval step in the sub-flow", key=True)
        comp = None
        if s.compensate is not None:
            cp = p + ("compensate",)
            self._known_action(s.compensate.action, cp + ("action",))
            comp = CompensationPlan(
                action=s.compensate.action, args=dict(s.compensate.with_),
                timeout_ms=self.duration(s.compensate.timeout, cp + ("timeout",), *STEP_TIMEOUT_MS, "timeout")
                or timeout or self.default_timeout,
                retry=self.retry_policy(s.compensate.retry, cp + ("retry",))
                if s.compensate.retry is not None else retry,
            )
        budget = StepBudgetPlan(**(s.budget.model_dump() if s.budget else {}))
        self._caps(budget.model_dump(), p + ("budget",))
        callback = None
        if s.callback is not None:
            if kind != "action":
                self.error("C418", f"callback goes with an action step (the action hands the callback to the system "
                                   f"it calls); step {s.id!r} is {kind}", p + ("callback",), key=True)
            waits = self.duration(s.callback.timeout, p + ("callback", "timeout"), 1, APPROVAL_TIMEOUT_MAX, "callback")
            schema = self.resolver.schema(s.callback.schema_, p + ("callback", "schema"), self) \
                if s.callback.schema_ is not None else None
            callback = CallbackPlan(timeout_ms=waits or 1, result_schema=schema)
        return PlanStep(
            id=s.id, index=i, kind=kind, args=dict(s.with_), when=s.when,
            timeout_ms=timeout or self.default_timeout, retry=retry, permissions=tuple(s.permissions),
            reauthorize=s.reauthorize, idempotency_key=s.idempotency_key,
            validations=tuple(ValidateRulePlan(check=v, message=None) if isinstance(v, str)
                              else ValidateRulePlan(check=v.check, message=v.message) for v in s.validate_),
            requires_approval_if=s.requires_approval_if, gate=gate,
            on_error=tuple(ErrorRoutePlan(errors=tuple(r.errors), next=r.next) for r in s.on_error),
            compensate=comp, concurrency=s.concurrency, lock=s.lock, circuit_breaker=s.circuit_breaker,
            isolation=s.isolation, callback=callback,
            budget=budget, next=None if traits_of(kind).terminal else nxt, edges=tuple(edges), **fields,
        )

    def _target(self, target: str, pointer: Pointer, ids: Sequence[str]) -> None:
        if target != END and target not in ids:
            import difflib

            close = difflib.get_close_matches(target, ids, n=1)
            hint = f"did you mean {close[0]!r}?" if close else "use a step id or 'end'"
            self.error("C401", f"unknown step {target!r}", pointer, hint)

    def _known_action(self, name: str, pointer: Pointer) -> ActionInfo | None:
        if self.actions is None:
            return None
        info = self.actions.get(name)
        if info is None:
            import difflib

            close = difflib.get_close_matches(name, list(self.actions), n=1)
            hint = (f"did you mean {close[0]!r}?" if close else "load the module that defines it: --actions "
                    "MODULE (a module or a .py file), or actions: in sealflow.yaml")
            self.error("C411", f"unknown action {name!r}", pointer, hint)
        return info

    def _trigger(self) -> TriggerPlan | None:
        t = self.d.trigger
        if t is None:
            return None
        return TriggerPlan(schedule=t.schedule.model_dump() if t.schedule else None,
                           event=t.event.model_dump() if t.event else None)

    def _input_schema(self) -> dict[str, Any] | None:
        if self.d.input is None:
            return None
        return self.resolver.schema(self.d.input.schema_, ("input", "schema"), self)

    def _budget(self) -> BudgetPlan:
        b = self.d.budget
        self._caps(b.model_dump(exclude={"max_runtime"}), ("budget",))
        runtime = self.duration(b.max_runtime, ("budget", "max_runtime"), 1000, RUNTIME_MAX, "max_runtime")
        return BudgetPlan(max_steps=b.max_steps, max_runtime_ms=runtime, max_tokens=b.max_tokens,
                          max_cost_usd=b.max_cost_usd, max_tool_calls=b.max_tool_calls)

    def _caps(self, values: dict[str, Any], pointer: Pointer) -> None:
        for key, value in values.items():
            if value is not None and key in CAPS and not 0 < value <= CAPS[key]:
                self.error("C408", f"{key} {value} is outside the allowed range (0, {CAPS[key]}]", pointer + (key,))

    def _action_meta(self) -> dict[str, ActionMeta]:
        if not self.actions:
            return {}
        every = [s for _, s in all_model_steps(self.d.steps)]
        used = {s.action for s in every if s.action} | {s.compensate.action for s in every if s.compensate}
        used |= {t for s in every if s.agent for t in s.agent.tools}
        return {n: ActionMeta(permissions=self.actions[n].permissions, effect=self.actions[n].effect,
                              honours_idempotency_key=self.actions[n].honours_idempotency_key)
                for n in sorted(used) if n in self.actions}

    # -- control flow ------------------------------------------------------------------------------
    def _flow_checks(self, plan: Plan) -> None:
        self._flow_checks_of(plan.steps, plan.start, ())

    def _flow_checks_of(self, steps: tuple[PlanStep, ...], start: str, base: Pointer) -> None:
        adj = graph.adjacency_of(steps)
        index = {s.id: s.index for s in steps}
        seen = graph.reachable(adj, start)
        for s in steps:
            if s.id not in seen:
                self.error("C404", f"step {s.id!r} can never run: no step leads to it", base + ("steps", s.index),
                           "remove it, or point a 'next', switch branch or on_error at it")
        if self.d.budget.max_steps is None:
            back = graph.find_back_edge(adj, start)
            if back is not None:
                src, dst = back
                self.error("C405", f"steps {dst!r}..{src!r} form a loop, and the workflow has no budget.max_steps",
                           base + ("steps", index[src]), "add budget: {max_steps: N} so a runaway loop stops")


def _where(pointer: Pointer) -> str:
    """``steps[2].map.steps[0]`` for a step's pointer."""
    out = ""
    for part in pointer:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


def _first_unsafe_number(value: Any, pointer: Pointer = (), depth: int = 0) -> tuple[Pointer, float] | None:
    """The first number in the document that a whole-number field would read beyond ±(2^53 - 1)."""
    if isinstance(value, float) and value.is_integer() and abs(value) > 2**53 - 1:
        return pointer, value
    if depth > 128:
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, sub in items:
        found = _first_unsafe_number(sub, pointer + (key,), depth + 1)
        if found:
            return found
    return None


def compile_definition(doc: Document, definition: Definition, *, actions: dict[str, ActionInfo] | None = None,
                       root: Path | None = None, facts: ProjectFacts | None = None,
                       check_called: Callable[[bytes, str], Any] | None = None
                       ) -> tuple[Plan | None, list[Diagnostic]]:
    compiler = Compiler(doc, definition, actions=actions, root=root, facts=facts, check_called=check_called)
    plan = compiler.compile()
    return plan, compiler.diagnostics
