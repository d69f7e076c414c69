"""How each step kind compiles into its plan node (action arguments, ai, agent, switch, approval, wait)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sealflow.dsl.document import Pointer
from sealflow.dsl.limits import AGENT_MAX_STEPS, APPROVAL_TIMEOUT_MAX, CAPS, QUORUM_MAX, WAIT_FOR_MAX
from sealflow.dsl.model import (
    ActionInfo,
    Agent,
    Ai,
    Approval,
    ApprovalDefaults,
    Step,
    SwitchCase,
    Wait,
)
from sealflow.dsl.plan import (
    AgentPlan,
    AiPlan,
    ApprovalPlan,
    Edge,
    RetryPolicy,
    SwitchCasePlan,
    WaitPlan,
)

if TYPE_CHECKING:
    from pathlib import Path

    from sealflow.dsl.errors import Diagnostic
    from sealflow.dsl.loader import Document
    from sealflow.dsl.model import Definition
    from sealflow.dsl.refs import SchemaResolver
    from sealflow.dsl.typecheck import ProjectFacts


class StepKinds:
    """Methods of :class:`~sealflow.dsl.compiler.Compiler` that build each step kind's plan node; they use the
    compiler's state and reporting, declared here for the type checker."""

    if TYPE_CHECKING:
        doc: Document
        d: Definition
        diagnostics: list[Diagnostic]
        resolver: SchemaResolver
        facts: ProjectFacts
        root: Path | None

        def error(self, code: str, message: str, pointer: Pointer, hint: str | None = None, *,
                  key: bool = False) -> None: ...

        def duration(self, text: str | None, pointer: Pointer, lo: int, hi: int, what: str) -> int | None: ...

        def _known_action(self, name: str, pointer: Pointer) -> ActionInfo | None: ...

        def _target(self, target: str, pointer: Pointer, ids: Sequence[str]) -> None: ...

    def _action(self, s: Step, action: str, p: Pointer) -> dict[str, Any]:
        info = self._known_action(action, p + ("action",))
        if info is not None:
            for perm in info.permissions:
                if perm not in s.permissions:
                    self.error("C413", f"action {action!r} needs permission {perm!r}; step {s.id!r} does not list it",
                               p + ("action",), f"add {perm!r} to the step's permissions")
            if info.effect == "irreversible" and not s.idempotency_key and info.honours_idempotency_key:
                self.error("C410", f"action {action!r} is irreversible; step {s.id!r} needs an idempotency_key",
                           p + ("action",), 'add idempotency_key: "${{ run.id }}:' + s.id + '"')
        return {"action": action}

    def _replay_check(self, s: Step, kind: str, retry: RetryPolicy, p: Pointer) -> None:
        """C420: a retry of ``invalid_output`` on a keyed action with ``validate`` rules replays the recorded result.

        The action ran (its effect happened), so the engine records its output under the key even when a rule
        fails it; the retry finds that entry and replays the same output, which fails the same rule, until the
        attempts run out. A fresh key would apply the effect again (a second email), so it is refused here.
        Only what replays: an ``ai`` step records no ledger entry (a retry asks the model again), an ``agent``
        checks its answer before recording it, and one attempt retries nothing."""
        if kind != "action" or not s.idempotency_key or not s.validate_ or "invalid_output" not in retry.on \
                or retry.max_attempts <= 1:
            return
        own = s.retry is not None
        at: Pointer
        if own and retry.name is None:  # an inline class: at its invalid_output
            where, at = "its inline retry class", ("retry", "on", retry.on.index("invalid_output"))
        elif own:
            where, at = f"retry class {retry.name!r}", ("retry",)
        else:
            named = f"retry class {retry.name!r}, " if retry.name else ""
            where, at = f"{named}from defaults.retry", ("idempotency_key",)
        self.error("C420", f"step {s.id!r} retries invalid_output ({where}), but a retry of a keyed step replays "
                   "the recorded result: its validate rules would fail the same output again", p + at,
                   "remove invalid_output from this step's retry class (e.g. retry: {on: [timeout, network], "
                   "max_attempts: 3}), or check the output in a later step; a fresh key would repeat the effect")

    def _ai(self, ai: Ai, p: Pointer) -> AiPlan:
        pp = p + ("ai",)
        prompt = ai.prompt
        ref = None
        template = prompt.template if prompt else None
        if prompt is not None and prompt.id is not None:
            ref = {"id": prompt.id, "version": prompt.version}
            template = self.resolver.prompt(prompt.id, prompt.version, pp + ("prompt",), self)
        schema = self.resolver.schema(ai.output_schema, pp + ("output_schema",), self)
        if ai.max_tokens is not None and ai.max_tokens > CAPS["max_tokens"]:
            self.error("C408", f"max_tokens {ai.max_tokens} is over {CAPS['max_tokens']}", pp + ("max_tokens",))
        return AiPlan(model=ai.model, fallback=tuple(ai.fallback), prompt_template=template,
                      prompt_ref=ref, system=ai.system, output_schema=schema, max_tokens=ai.max_tokens,
                      temperature=ai.temperature)

    def _agent(self, s: Step, ag: Agent, p: Pointer) -> AgentPlan:
        pp = p + ("agent",)
        if not 1 <= ag.max_steps <= AGENT_MAX_STEPS:
            self.error("C408", f"agent max_steps {ag.max_steps} is outside 1..{AGENT_MAX_STEPS}", pp + ("max_steps",))
        if ag.max_tool_calls is not None and ag.max_tool_calls > CAPS["max_tool_calls"]:
            self.error("C408", f"max_tool_calls {ag.max_tool_calls} is over {CAPS['max_tool_calls']}",
                       pp + ("max_tool_calls",))
        for j, tool in enumerate(ag.tools):
            info = self._known_action(tool, pp + ("tools", j))
            if info is not None:
                for perm in info.permissions:
                    if perm not in s.permissions:
                        self.error("C413", f"tool {tool!r} needs permission {perm!r}; step {s.id!r} does not list it",
                                   pp + ("tools", j), f"add {perm!r} to the step's permissions")
        schema = self.resolver.schema(ag.output_schema, pp + ("output_schema",), self)
        from sealflow.dsl.compile_mcp import mcp_tools

        return AgentPlan(model=ag.model, goal=ag.goal, tools=tuple(ag.tools),
                         mcp_tools=mcp_tools(self, s, ag, pp), max_steps=ag.max_steps,
                         max_tool_calls=ag.max_tool_calls, output_schema=schema, system=ag.system,
                         max_tokens=ag.max_tokens, temperature=ag.temperature,
                         approval_required=tuple(ag.approval_required), approval=self._agent_approval(ag, pp))

    def _agent_approval(self, ag: Agent, pp: Pointer) -> ApprovalPlan | None:
        """Who approves an agent's tool calls: ``agent.approval`` over the top-level ``approvals``. None when
        neither names approvers (then no tool may need approval, and irreversible tools stay refused)."""
        for j, tool in enumerate(ag.approval_required):
            if tool not in ag.tools:
                self.error("C401", f"approval_required names {tool!r}, which is not one of the agent's tools",
                           pp + ("approval_required", j), "list it in agent.tools too, or remove it")
        a = ag.approval
        defaults = self.d.approvals
        if not ((a and a.approvers) or (defaults and defaults.approvers)):
            if ag.approval_required or a is not None:
                self.error("C418", "the agent's tool approvals have no approvers", pp + ("approval",),
                           "list agent.approval.approvers, or approvers in the top-level 'approvals:'")
            return None
        gate = Approval(approvers=a.approvers, quorum=a.quorum, timeout=a.timeout,
                        separation_of_duties=a.separation_of_duties) if a else None
        return self._approval(gate, pp + ("approval",), [])

    def _switch(self, s: Step, cases: list[SwitchCase], p: Pointer, ids: Sequence[str],
                nxt: str) -> tuple[tuple[SwitchCasePlan, ...], list[Edge]]:
        edges: list[Edge] = []
        if not cases:
            self.error("C414", f"switch {s.id!r} has no branch", p + ("switch",), "add {when: <expr>, next: <id>}")
        for j, case in enumerate(cases):
            self._target(case.next, p + ("switch", j, "next"), ids)
            if case.when is None and j != len(cases) - 1:
                self.error("C414", "a branch without 'when' (the default) must be the last", p + ("switch", j),
                           "move the default branch to the end")
            edges.append(Edge(kind="case" if case.when is not None else "default", target=case.next,
                              label=case.when))
        if not cases or cases[-1].when is not None:
            edges.append(Edge(kind="next", target=nxt, label="no match"))
        return tuple(SwitchCasePlan(when=c.when, next=c.next) for c in cases), edges

    def _approval(self, a: Approval | None, pointer: Pointer, ids: Sequence[str],
                  implicit: bool = False) -> ApprovalPlan | None:
        defaults = self.d.approvals or ApprovalDefaults()
        approvers = (a.approvers if a and a.approvers else None) or defaults.approvers
        if not approvers:
            self.error("C418", "approval gate has no approvers", pointer,
                       "list approvers on the step or in the top-level 'approvals: {approvers: [...]}'")
            return None
        quorum = (a.quorum if a and a.quorum else None) or defaults.quorum
        if not 1 <= quorum <= QUORUM_MAX:
            self.error("C408", f"quorum {quorum} is outside 1..{QUORUM_MAX}", pointer + ("quorum",))
        tp = pointer + ("timeout",) if a and a.timeout else ("approvals", "timeout")
        timeout = self.duration((a.timeout if a and a.timeout else None) or defaults.timeout, tp, 1000,
                                APPROVAL_TIMEOUT_MAX, "approval timeout") or 0
        on_timeout = "reject"
        if a is not None and a.on_timeout != "reject":
            on_timeout = a.on_timeout.next
            self._target(on_timeout, pointer + ("on_timeout", "next"), ids)
        editable = None
        if a is not None and a.editable is not None:
            if a.show is None:
                self.error("C418", "editable needs show: what an approver may edit is the gate's show value",
                           pointer + ("editable",), "add show: <the value to review and edit>")
            editable = self.resolver.schema(a.editable.schema_, pointer + ("editable", "schema"), self)
        return ApprovalPlan(approvers=tuple(approvers), quorum=quorum, timeout_ms=timeout, on_timeout=on_timeout,
                            show=a.show if a else None,
                            separation_of_duties=a.separation_of_duties if a else True, implicit=implicit,
                            editable_schema=editable)

    def _wait(self, w: Wait, p: Pointer) -> WaitPlan | None:
        given = [k for k, v in (("for", w.for_), ("until", w.until), ("event", w.event)) if v is not None]
        if len(given) != 1:
            self.error("C418", "wait needs exactly one of 'for', 'until' or 'event'"
                       + (f" (it has {' and '.join(given)})" if given else ""), p + ("wait",))
            return WaitPlan()
        if w.event is None:
            extra = [k for k, v in (("source", w.source), ("match", w.match), ("schema", w.schema_),
                                    ("timeout", w.timeout)) if v is not None]
            if extra:
                self.error("C418", f"wait.{extra[0]} goes with wait.event (a wait for an event); a wait for a time "
                                   "takes only 'for' or 'until'", p + ("wait", extra[0]))
            ms = self.duration(w.for_, p + ("wait", "for"), 0, WAIT_FOR_MAX, "wait") if w.for_ else None
            return WaitPlan(for_ms=ms, until=w.until)
        if w.timeout is None:
            self.error("C418", "a wait for an event needs a timeout: how long it waits before the step fails with "
                               "timeout (route it with on_error)", p + ("wait",), "add timeout: 1h")
            return WaitPlan(event=w.event)
        timeout = self.duration(w.timeout, p + ("wait", "timeout"), 1, WAIT_FOR_MAX, "wait")
        schema = self.resolver.schema(w.schema_, p + ("wait", "schema"), self) if w.schema_ is not None else None
        return WaitPlan(event=w.event, source=w.source, match=w.match, event_schema=schema, timeout_ms=timeout)

    # -- workflow level ----------------------------------------------------------------------------
