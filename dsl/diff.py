"""The security diff: what changed between two compiled plans that matters for safety.

Pure: plans in, findings out. Comparing compiled :class:`~sealflow.dsl.plan.Plan` objects means
formatting, key order, comments, flow vs block style and defaults written out or left
implicit make no difference; a named retry class or ``defaults`` change shows up on
every step it reaches. Each :class:`Finding` has a code (``D6xx``, registered in
:mod:`sealflow.dsl.codes`), a severity (``review``: a security reviewer must look; ``info``:
for the record), the workflow, the step, old -> new, and where it is in the new file.

Workflows are matched by ``name``: a new (name, version) is compared with the same
version on the old side, else with the highest old version of that name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sealflow.dsl.codes import CODES
from sealflow.dsl.diff_risks import new_step_risks, step_risks, workflow_risks
from sealflow.dsl.diff_steps import StepChecks
from sealflow.dsl.document import Pointer
from sealflow.dsl.durations import format_ms
from sealflow.dsl.errors import Location
from sealflow.dsl.kinds import traits_of
from sealflow.dsl.plan import Plan, PlanStep

Locate = Callable[[Pointer], Location]

_RANK = {"review": 0, "info": 1}


@dataclasses.dataclass(frozen=True)
class Finding:
    """One change that matters for safety."""

    code: str
    severity: str  # "review" | "info"
    workflow: str
    message: str
    step: str | None = None
    old: Any = None
    new: Any = None
    location: Location | None = None
    #: the file the finding is about (the new file; the old one for a removed workflow)
    path: str = ""

    @property
    def where(self) -> str:
        return self.workflow + (f" / {self.step}" if self.step else "")

    def format(self) -> str:
        place = str(self.location) if self.location else (self.path or self.workflow)
        return f"{place}: {self.severity}[{self.code}]: {self.where}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        loc = self.location
        return {"code": self.code, "severity": self.severity, "workflow": self.workflow, "step": self.step,
                "message": self.message, "old": _jsonable(self.old), "new": _jsonable(self.new),
                "path": loc.path if loc else self.path or None, "line": loc.line if loc else None,
                "column": loc.column if loc else None}


def _jsonable(value: Any) -> Any:
    if isinstance(value, (tuple, list, set, frozenset)):
        return [_jsonable(v) for v in (sorted(value) if isinstance(value, (set, frozenset)) else value)]
    return value


@dataclasses.dataclass(frozen=True)
class Side:
    """One compiled definition on one side of the diff, and how to locate things in its file."""

    plan: Plan
    path: str
    locate: Locate | None = None


class _Differ(StepChecks):
    def __init__(self, old: Plan, new: Plan, locate: Locate | None, path: str):
        self.old, self.new, self.path = old, new, path
        self.locate = locate
        self.findings: list[Finding] = []
        self.new_pointer = {s.id: p for p, s in new.all_steps()}

    def add(self, code: str, message: str, pointer: Pointer | None, *, step: str | None = None,
            old: Any = None, new: Any = None) -> None:
        severity = CODES[code][0]
        loc = self.locate(pointer) if (self.locate and pointer is not None) else None
        self.findings.append(Finding(code, severity, self.new.name, message, step, old, new, loc, self.path))

    def sp(self, step_id: str, *rest: Any) -> Pointer:
        """Pointer inside step ``step_id`` of the new file."""
        return (*self.new_pointer[step_id], *rest)

    def _call(self, old: PlanStep, new: PlanStep, sid: str) -> None:
        """D635: the workflow a step calls changed (its digest: every change inside it); the called workflow's own
        findings follow, each named by the call."""
        what, inner = _called(old, new)
        n = new.call
        self.add("D635", f"called workflow {what}: what runs as this step's child changed", self.sp(sid, "call")
                 if n is not None else self.sp(sid), step=sid, old=None if old.call is None else old.call.digest,
                 new=None if n is None else n.digest)
        for f in inner:
            self.add(f.code, f"in {n.workflow if n else '?'} (called by step {sid!r}): {f.message}",
                     self.sp(sid, "call"), step=sid, old=f.old, new=f.new)

    # -- the whole workflow ------------------------------------------------------------------------
    def run(self) -> list[Finding]:
        o, n = self.old, self.new
        if o.digest == n.digest and o.digest:
            return []
        if o.version == n.version:
            self.add("D625", f"definition changed but its version is still {n.version}: a signed (name, version) "
                     "is immutable, the runtime refuses a second digest", ("version",), old=o.digest, new=n.digest)
        self._permissions(o.permissions, n.permissions, ("permissions",), None)
        self._budget_fields(o.budget, n.budget, ("budget",), None, {
            "max_steps": "max_steps", "max_runtime_ms": "max_runtime", "max_tokens": "max_tokens",
            "max_cost_usd": "max_cost_usd", "max_tool_calls": "max_tool_calls"}, prefix="budget")
        self._triggers()
        self._inventory()
        old_steps = {s.id: s for _, s in o.all_steps()}
        new_steps = {s.id: s for _, s in n.all_steps()}
        for sid, ns in new_steps.items():
            os_ = old_steps.get(sid)
            if os_ is None:
                self._added_step(ns)
            else:
                self._step(os_, ns)
        for sid, os_ in old_steps.items():
            if sid not in new_steps:
                self._removed_step(os_)
        workflow_risks(self)
        return self.findings

    def _permissions(self, old: Iterable[str], new: tuple[str, ...], pointer: Pointer, step: str | None) -> None:
        old_set = set(old)
        for j, perm in enumerate(new):
            if perm not in old_set:
                self.add("D601", f"permission added: {perm}", pointer + (j,), step=step, old=None, new=perm)
        for perm in sorted(old_set - set(new)):
            self.add("D602", f"permission removed: {perm}", pointer, step=step, old=perm, new=None)

    def _budget_fields(self, old: Any, new: Any, pointer: Pointer, step: str | None, fields: dict[str, str], *,
                       prefix: str) -> None:
        for attr, key in fields.items():
            a, b = getattr(old, attr, None) if old is not None else None, getattr(new, attr, None)
            if a == b:
                continue
            show = (lambda v: format_ms(v)) if attr.endswith("_ms") else (lambda v: v)  # noqa: E731
            label = f"{prefix}.{key}"
            if a is not None and b is None:
                self.add("D603", f"{label} removed: {show(a)} -> unlimited", pointer + (key,), step=step,
                         old=a, new=None)
            elif a is not None and b > a:
                self.add("D603", f"{label} raised: {show(a)} -> {show(b)}", pointer + (key,), step=step, old=a, new=b)
            elif a is None:
                self.add("D604", f"{label} added: unlimited -> {show(b)}", pointer + (key,), step=step, old=None,
                         new=b)
            else:
                self.add("D604", f"{label} lowered: {show(a)} -> {show(b)}", pointer + (key,), step=step,
                         old=a, new=b)

    def _triggers(self) -> None:
        ot, nt = self.old.trigger, self.new.trigger
        osched, nsched = (ot.schedule if ot else None), (nt.schedule if nt else None)
        oevent, nevent = (ot.event if ot else None), (nt.event if nt else None)
        sp = ("trigger", "schedule")
        if nsched and not osched:
            self.add("D618", f"schedule trigger added: cron {nsched.get('cron')!r} ({nsched.get('timezone')}), "
                     f"runs as {nsched.get('run_as')}", sp, old=None, new=nsched)
        elif osched and not nsched:
            self.add("D619", "schedule trigger removed", ("trigger",), old=osched, new=None)
        elif osched and nsched:
            if osched.get("run_as") != nsched.get("run_as"):
                self.add("D620", f"schedule runs as another identity: {osched.get('run_as')} -> "
                         f"{nsched.get('run_as')}", sp + ("run_as",), old=osched.get("run_as"),
                         new=nsched.get("run_as"))
            for key in ("cron", "timezone"):
                if osched.get(key) != nsched.get(key):
                    self.add("D619", f"schedule {key} changed: {osched.get(key)} -> {nsched.get(key)}", sp + (key,),
                             old=osched.get(key), new=nsched.get(key))
        ep = ("trigger", "event")
        if nevent and not oevent:
            self.add("D618", f"event trigger added: {nevent.get('type')}"
                     + (f" from {nevent['source']}" if nevent.get("source") else ""), ep, old=None, new=nevent)
        elif oevent and not nevent:
            self.add("D619", "event trigger removed", ("trigger",), old=oevent, new=None)
        elif oevent and nevent:
            for key in ("type", "source", "filter"):
                if oevent.get(key) != nevent.get(key):
                    self.add("D618", f"event trigger {key} changed: {oevent.get(key)} -> {nevent.get(key)}",
                             ep + (key,), old=oevent.get(key), new=nevent.get(key))

    def _inventory(self) -> None:
        """Actions, models and tools the workflow did not use before."""
        old_actions, old_models, old_tools = uses(self.old)
        new_actions, new_models, new_tools = uses(self.new)
        for name, pointer in new_actions.items():
            if name in old_actions:
                continue
            meta = self.new.actions.get(name)
            if meta is None:
                self.add("D611", f"new action {name} (effect unknown: pass --actions to tell irreversible ones)",
                         pointer, step=_step_of(self.new, pointer), new=name)
            elif meta.effect == "irreversible":
                self.add("D610", f"new irreversible action {name}", pointer, step=_step_of(self.new, pointer),
                         new=name)
            else:
                self.add("D612", f"new action {name} (effect {meta.effect})", pointer,
                         step=_step_of(self.new, pointer), new=name)
        for name, pointer in new_models.items():
            if name not in old_models:
                self.add("D613", f"new model {name}", pointer, step=_step_of(self.new, pointer), new=name)
        for name, pointer in new_tools.items():
            if name not in old_tools:
                self.add("D614", f"new agent tool {name}", pointer, step=_step_of(self.new, pointer), new=name)

    # -- steps -------------------------------------------------------------------------------------
    def _added_step(self, ns: PlanStep) -> None:
        self.add("D626", f"step added ({ns.action or ns.kind})", self.sp(ns.id), step=ns.id, new=ns.kind)
        self._permissions((), ns.permissions, self.sp(ns.id, "permissions"), ns.id)
        if ns.approval is not None or ns.gate is not None:
            self.add("D609", "approval gate added", self.sp(ns.id), step=ns.id)
        new_step_risks(self, ns)

    def _removed_step(self, os_: PlanStep) -> None:
        if os_.approval is not None:
            self.add("D607", f"approval step {os_.id} removed (approvers {', '.join(os_.approval.approvers)})",
                     ("steps",), step=os_.id, old=os_.approval.approvers, new=None)
        if os_.gate is not None:
            self.add("D607", f"step {os_.id} removed, and with it its approval gate "
                     f"(requires_approval_if: {os_.requires_approval_if})", ("steps",), step=os_.id,
                     old=os_.requires_approval_if, new=None)
        if os_.validations or _output_schema(os_) is not None:
            self.add("D622", f"step {os_.id} removed, and with it its output checks", ("steps",), step=os_.id)
        self.add("D626", f"step removed ({os_.action or os_.kind})", ("steps",), step=os_.id, old=os_.kind)

    def _step(self, os_: PlanStep, ns: PlanStep) -> None:
        sid = ns.id
        if os_.kind != ns.kind:
            self.add("D626", f"step kind changed: {os_.kind} -> {ns.kind}", self.sp(sid), step=sid, old=os_.kind,
                     new=ns.kind)
        elif os_.action != ns.action:
            self.add("D626", f"step action changed: {os_.action} -> {ns.action}", self.sp(sid, "action"), step=sid,
                     old=os_.action, new=ns.action)
        self._permissions(os_.permissions, ns.permissions, self.sp(sid, "permissions"), sid)
        self._budget_fields(os_.budget, ns.budget, self.sp(sid, "budget"), sid,
                            {"max_tokens": "max_tokens", "max_cost_usd": "max_cost_usd",
                             "max_tool_calls": "max_tool_calls"}, prefix="budget")
        if os_.ai and ns.ai:
            self._budget_fields(os_.ai, ns.ai, self.sp(sid, "ai"), sid, {"max_tokens": "max_tokens"}, prefix="ai")
        if os_.agent and ns.agent:
            self._budget_fields(os_.agent, ns.agent, self.sp(sid, "agent"), sid,
                                {"max_steps": "max_steps", "max_tool_calls": "max_tool_calls",
                                 "max_tokens": "max_tokens"}, prefix="agent")
        if traits_of(ns.kind).calls_out and traits_of(os_.kind).calls_out:  # the kinds that run, retry and time out
            self._retry(os_.retry, ns.retry, self.sp(sid, "retry"), sid, "retry")
            self._timeout(os_.timeout_ms, ns.timeout_ms, self.sp(sid, "timeout"), sid, "timeout")
        if os_.compensate and ns.compensate:
            self._retry(os_.compensate.retry, ns.compensate.retry, self.sp(sid, "compensate", "retry"), sid,
                        "compensate.retry")
            self._timeout(os_.compensate.timeout_ms, ns.compensate.timeout_ms,
                          self.sp(sid, "compensate", "timeout"), sid, "compensate.timeout")
        self._gates(os_, ns)
        if os_.map and ns.map:
            self._map(os_.map, ns.map, sid)
        if os_.callback != ns.callback:
            what = "added: the step's result now comes from outside, posted with a token" if os_.callback is None else \
                "removed: the action's return value is the result again" if ns.callback is None else \
                "changed (its timeout or the schema of the posted result)"
            self.add("D634", f"callback {what}", self.sp(sid, "callback") if ns.callback else self.sp(sid), step=sid,
                     old=None if os_.callback is None else os_.callback.timeout_ms,
                     new=None if ns.callback is None else ns.callback.timeout_ms)
        if (os_.call is None) != (ns.call is None) or (os_.call and ns.call and os_.call.digest != ns.call.digest):
            self._call(os_, ns, sid)
        if ns.wait is not None and ns.wait.event is not None:
            before = os_.wait if os_.wait is not None else None
            changed = [f for f in ("event", "source", "match", "event_schema")
                       if getattr(before, f, None) != getattr(ns.wait, f)]
            if changed:
                names = ", ".join("schema" if f == "event_schema" else f for f in changed)
                self.add("D633", f"the wait now takes a different event ({names} changed): what enters the run from "
                         f"outside is {ns.wait.event!r}" + (f" from {ns.wait.source!r}" if ns.wait.source else
                                                             " from any source of the tenant"),
                         self.sp(sid, "wait"), step=sid, old=before.event if before is not None else None,
                         new=ns.wait.event)
        if os_.idempotency_key and not ns.idempotency_key:
            self.add("D616", f"idempotency_key dropped (was {os_.idempotency_key!r}): a redelivered message may "
                     "repeat the effect", self.sp(sid), step=sid, old=os_.idempotency_key, new=None)
        elif os_.idempotency_key and ns.idempotency_key != os_.idempotency_key:
            self.add("D617", f"idempotency_key changed: {os_.idempotency_key!r} -> {ns.idempotency_key!r}",
                     self.sp(sid, "idempotency_key"), step=sid, old=os_.idempotency_key, new=ns.idempotency_key)
        step_risks(self, os_, ns)
        if os_.reauthorize and not ns.reauthorize:
            self.add("D621", "reauthorize turned off: permissions are no longer checked again right before the "
                     "step runs", self.sp(sid, "reauthorize"), step=sid, old=True, new=False)
        new_checks = {v.check for v in ns.validations}
        for v in os_.validations:
            if v.check not in new_checks:
                self.add("D622", f"validate rule removed: {v.check!r}", self.sp(sid, "validate"), step=sid,
                         old=v.check, new=None)
        if _output_schema(os_) is not None and _output_schema(ns) is None:
            self.add("D622", "output_schema removed: model output is no longer checked against a schema",
                     self.sp(sid, ns.kind), step=sid, old=_output_schema(os_), new=None)



def _called(old: PlanStep, new: PlanStep) -> tuple[str, list[Finding]]:
    """What changed in a call (a message), and the changes inside the called workflow when both call one."""
    o, n = old.call, new.call
    if o is None or n is None:
        return ("added: this step now runs " + f"{n.workflow} v{n.version} ({n.digest[:19]}...)" if n is not None
                else "removed"), []
    inner = diff_plans(o.plan, n.plan) if o.workflow == n.workflow else []
    return (f"{o.workflow} v{o.version} ({o.digest[:19]}...) -> {n.workflow} v{n.version} ({n.digest[:19]}...)",
            inner)


def _output_schema(step: PlanStep) -> Any:
    body = step.ai or step.agent
    return body.output_schema if body is not None else None


def uses(plan: Plan) -> tuple[dict[str, Pointer], dict[str, Pointer], dict[str, Pointer]]:
    """Actions, models and agent tools used by ``plan``, each with the pointer of its first use."""
    actions: dict[str, Pointer] = {}
    models: dict[str, Pointer] = {}
    tools: dict[str, Pointer] = {}
    for p, s in plan.all_steps():
        if s.action:
            actions.setdefault(s.action, p + ("action",))
        if s.compensate:
            actions.setdefault(s.compensate.action, p + ("compensate", "action"))
        if s.ai:
            models.setdefault(s.ai.model, p + ("ai", "model"))
            for j, m in enumerate(s.ai.fallback):
                models.setdefault(m, p + ("ai", "fallback", j))
        if s.agent:
            models.setdefault(s.agent.model, p + ("agent", "model"))
            for j, t in enumerate(s.agent.tools):
                tools.setdefault(t, p + ("agent", "tools", j))
    return actions, models, tools


def _step_of(plan: Plan, pointer: Pointer) -> str | None:
    found = None
    for p, s in plan.all_steps():  # the innermost step whose pointer starts ``pointer``
        if pointer[:len(p)] == p:
            found = s.id
    return found


def diff_plans(old: Plan | None, new: Plan | None, *, locate: Locate | None = None, path: str = "",
               old_path: str = "") -> list[Finding]:
    """Every safety-relevant change from ``old`` to ``new`` (either may be None: added, removed)."""
    if old is None and new is None:
        return []
    if new is None:
        assert old is not None
        return [Finding("D624", CODES["D624"][0], old.name, f"workflow removed: {old.name} v{old.version}",
                        old=old.version, path=old_path)]
    if old is None:
        actions, models, tools = uses(new)
        parts = [f"permissions [{', '.join(new.permissions)}]" if new.permissions else "no permissions"]
        if actions:
            parts.append(f"actions [{', '.join(actions)}]")
        if models:
            parts.append(f"models [{', '.join(models)}]")
        if tools:
            parts.append(f"agent tools [{', '.join(tools)}]")
        if new.trigger and (new.trigger.schedule or new.trigger.event):
            parts.append("a trigger")
        loc = locate(("name",)) if locate else None
        return [Finding("D623", CODES["D623"][0], new.name, f"new workflow {new.name} v{new.version}: "
                        + "; ".join(parts), new=new.version, location=loc, path=path)]
    return sort_findings(_Differ(old, new, locate, path).run())


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Per workflow, review before info, then in file order."""
    def key(f: Finding) -> tuple[str, int, int, int, str]:
        loc = f.location
        return (f.workflow, _RANK.get(f.severity, 2), loc.line if loc else 0, loc.column if loc else 0, f.code)

    return sorted(findings, key=key)


def pair(old: list[Side], new: list[Side]) -> Iterator[tuple[Side | None, Side | None]]:
    """Match workflows by name: same version first, else the highest old version of the same name.

    Yields (old, new) pairs; (None, new) for a new workflow, (old, None) for a removed (name, version)
    that no newer version of the same name succeeds.
    """
    old_by = {(s.plan.name, s.plan.version): s for s in old}
    new_keys = {(s.plan.name, s.plan.version) for s in new}
    succeeded: set[tuple[str, int]] = set()
    for side in new:
        key = (side.plan.name, side.plan.version)
        match = old_by.get(key)
        if match is None:
            same_name = [s for (name, _), s in old_by.items() if name == side.plan.name]
            match = max(same_name, key=lambda s: s.plan.version) if same_name else None
            if match is not None:
                succeeded.add((match.plan.name, match.plan.version))
        yield match, side
    for key, side in old_by.items():
        if key not in new_keys and key not in succeeded:
            yield side, None


def diff_sides(old: list[Side], new: list[Side]) -> list[Finding]:
    """Every finding between two sets of compiled definitions."""
    out: list[Finding] = []
    for a, b in pair(old, new):
        out.extend(diff_plans(a.plan if a else None, b.plan if b else None,
                              locate=b.locate if b else None, path=b.path if b else "",
                              old_path=a.path if a else ""))
    return sort_findings(out)


def needs_review(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "review" for f in findings)


__all__ = ["Finding", "Side", "diff_plans", "diff_sides", "pair", "sort_findings", "needs_review"]
