"""The agent loop: the model proposes, the system decides.

One attempt of an ``agent`` step is a bounded conversation with a model (see
:mod:`sealflow.providers.base`, "Tool use"). Each turn the model either
proposes one tool call or gives its final answer. A proposed call runs only after
it passes, in this order:

1. **shape**: a tool name (text) and arguments (a map); else refused (``malformed_call``);
2. **allow-list**: the name is one of the step's ``tools``; else refused (``not_allowed``);
3. **policy**: the tool's permissions are all held by the step, and its action is not
   ``irreversible`` unless the step has approvers for its tool calls (``agent.approval`` or
   the top-level ``approvals``); else the step fails with ``policy_denied``. Such tools are
   not even offered to the model;
4. **arguments**: they satisfy the tool's argument schema (built from the action's
   signature, :mod:`sealflow.steps.agent.tools`; undeclared arguments are refused) and
   serialise to at most 8 KiB of JSON; else refused (``invalid_arguments``);
5. **budget**: fewer calls made than the least of ``agent.max_tool_calls``, the step's
   ``budget.max_tool_calls`` and what is left of the run's ``budget.max_tool_calls``;
   else the step fails with ``budget_exceeded``;
6. **approval**: a tool in ``agent.approval_required``, and any irreversible tool, runs only
   after a person approves that exact call (:mod:`sealflow.steps.agent.approval`).

A refused call does not run; the refusal is fed back to the model as a turn, and three
refusals in a row fail the step with ``policy_denied``. A call that runs and fails
(``StepError`` or any exception) is fed back as an error turn with its class (and its
message, except for ``internal`` errors, whose details stay in the logs); it is not
retried inside the loop. A call that outlives the attempt's timeout times the attempt
out. The step also fails with ``budget_exceeded`` when the model has not answered within
``max_steps`` turns, or when the tokens or cost of its turns exceed the run's or the
step's ``max_tokens``/``max_cost_usd``. As everywhere (:mod:`sealflow.policy.budgets`), a
step's own limits (``max_steps``, ``agent.max_tool_calls``, the step's ``budget``) fail
the step, which ``on_error`` may route; the *run's* budgets end the run at once.

The final answer is checked like an ``ai`` step's: ``output_schema``, then the step's
``validate`` rules (``invalid_output``). Tokens, cost and tool calls are charged to the
run whatever the outcome.

**Idempotency.** Each tool call gets ``ctx.idempotency_key`` =
``<base>:tool:<name>:<sha256 of the arguments, 16 hex>:<n>``, where ``n`` counts identical
calls in the attempt and ``<base>`` is the step's rendered ``idempotency_key`` when it has
one, else ``<run id>:<step id>:<visit>`` (``visit``: the attempt number of the visit's
first try, the same for every retry and for a recovered attempt). So a retried or
recovered attempt that proposes the same write again passes the same key, and an action
that honours ``ctx.idempotency_key`` (as the demo actions marked *once* do) performs it once. The
run's idempotency ledger is written only in a step's commit, so it cannot record calls
in the middle of a step: deduplicating an agent's write calls is the action's job. A
dead-letter redrive starts a new visit (new keys) unless the step has an
``idempotency_key``. With an ``idempotency_key`` the step's final output is also
recorded in the ledger and replayed, like an action's.

**Audit.** The attempt's ``data`` (and a ``step.detail`` audit event) holds a minimised
transcript: per call its number, tool name, a hash of the arguments and the outcome;
never arguments or results. Secret values known to the process are redacted from tool
results and error messages before the model sees them. A tool name the model invented that is not a well-formed
action name is recorded as a hash too. MCP tools (``agent.mcp_tools``) pass the same checks, after the live
server is compared with the lock (:mod:`sealflow.steps.agent.mcp`).
"""

from __future__ import annotations

import copy
import json
import logging
from typing import TYPE_CHECKING, Any

from sealflow.core.errors import StepError
from sealflow.core.outcomes import Failed, Outcome, Succeeded, Waiting
from sealflow.core.redaction import REDACTOR
from sealflow.dsl import expressions
from sealflow.execution.breakers import through_model
from sealflow.execution.calls import call
from sealflow.execution.context import Execution, StepContext
from sealflow.execution.idempotency import ledger_lookup
from sealflow.policy import limits as rate_limits
from sealflow.steps.agent import approval, mcp, pacing
from sealflow.steps.agent.conversation import Tool
from sealflow.steps.agent.tools import digest, safe_name, tools_for, unpack
from sealflow.steps.checks import jsonschema_best, schema_failure, validation_failure
from sealflow.steps.sections import section

if TYPE_CHECKING:
    from sealflow.providers.base import ModelRequest, ModelResult, Provider

log = logging.getLogger("sealflow.agent")

REFUSALS_IN_A_ROW = 3
MAX_ARGUMENT_BYTES = 8 * 1024
MAX_RESULT_CHARS = 16_000


class AgentLoop:
    """One attempt of an agent step (see the module docstring)."""

    def __init__(self, x: Execution):
        self.x = x
        self.agent = section(x, x.step.agent, "agent")  # run() refuses a step without one first
        self.transcript: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []  # the minimised record of each proposed call
        self.tokens = 0
        self.cost = 0.0
        self.tool_calls = 0
        self.turns = 0
        self.refusals = 0
        self.in_a_row = 0
        self.seen: dict[str, int] = {}
        self.model = self.agent.model
        self.tools: dict[str, Tool] = {}
        self.base_key = f"{x.run.id}:{x.step_id}:{x.attempt.attempt - x.attempt.try_no + 1}"
        self.step_key: str | None = None
        #: tokens, cost and tool calls already charged to the run (by a wait for a rate limit)
        self.billed: tuple[int, float, int] = (0, 0.0, 0)

    def unbilled(self) -> tuple[int, float, int]:
        """The tokens, cost and tool calls of this conversation not yet charged to the run."""
        return (self.tokens - int(self.billed[0]), self.cost - float(self.billed[1]),
                self.tool_calls - int(self.billed[2]))

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> Outcome:
        from sealflow.providers.base import ModelRequest

        x, agent = self.x, self.agent
        if x.step.idempotency_key:
            self.step_key = self.base_key = expressions.to_text(x.render(x.step.idempotency_key))
            recorded = ledger_lookup(x, self.step_key)
            if recorded is not None:
                return recorded
        tools = tools_for(x)
        if isinstance(tools, Failed):
            return tools
        self.tools = tools
        if x.resumed and "opened_at" in x.attempt.data:  # a tool call's approval timed out: fail closed
            return approval.timed_out(self)
        if agent.mcp_tools:  # each MCP tool as locked, before the model sees any tool (steps/agent/mcp.py)
            refused = mcp.verify(x, agent)
            if refused is not None:
                return self.fail(refused.error_class, refused.message, refused.retry_after)
        try:
            provider = x.services.provider_for(agent.model)
        except StepError as exc:
            return Failed(exc.error_class, exc.message, exc.retry_after)
        if x.resumed and pacing.PARKED in x.attempt.data:  # it waited for the model's rate limit: go on
            pacing.resume(self)
        stop: Outcome | None
        if approval.RESUME in x.attempt.data:  # a person decided the call this conversation waited on
            stop = approval.resume(self, x.attempt.data[approval.RESUME])
            if stop is not None:
                return stop
        goal = expressions.to_text(x.render(agent.goal))
        system = expressions.to_text(x.render(agent.system)) if agent.system else None
        offered = tuple(t.spec for t in tools.values() if t.denied is None)
        while self.turns < agent.max_steps:
            stop = self.before_turn()
            if stop is not None:
                return stop
            self.turns += 1
            request = ModelRequest(model=agent.model, prompt=goal, system=system, output_schema=agent.output_schema,
                                   max_tokens=pacing.max_tokens(agent, provider), temperature=agent.temperature,
                                   idempotency_key=f"{x.run.id}:{x.step_id}:{x.attempt.attempt}:turn{self.turns}",
                                   deadline=x.deadline(), tools=offered,
                                   transcript=copy.deepcopy(tuple(self.transcript)))
            taken = pacing.before_turn(self, provider, request)  # the tenant's reservation, the rate limit
            if isinstance(taken, (Failed, Waiting)):
                return taken
            made: list[bool] = []

            def ask(ctx: StepContext, p: Provider = provider, r: ModelRequest = request,
                    made: list[bool] = made) -> ModelResult:
                made.append(True)
                return p.complete(r)

            answered = through_model(x, agent.model, provider,  # the model's circuit breaker, if configured
                                     lambda: call(x, ask, None))
            if isinstance(answered, Failed):
                rate_limits.ended(x, taken, made=bool(made))  # not made: the breaker refused the turn
                return self.fail(answered.error_class, answered.message, answered.retry_after,
                                 timed_out=answered.timed_out)
            result = answered.output
            rate_limits.settle(x, taken, getattr(result, "total_tokens", 0))
            self.model = getattr(result, "model", "") or agent.model
            over = self.charge(result)
            if over is not None:
                return over
            proposed = getattr(result, "tool_call", None)
            if proposed is None:
                return self.finish(getattr(result, "output", None))
            stop = self.propose(proposed)
            if stop is not None:
                return stop
        return self.fail("budget_exceeded", f"the agent did not give a final answer within its max_steps of "
                                            f"{agent.max_steps} model turns ({self.tool_calls} tool calls made); "
                                            "raise agent.max_steps or narrow the goal")

    def before_turn(self) -> Failed | None:
        x = self.x
        if x.services.is_cancelled(x.run.id):
            return self.fail("cancelled", "the run is being cancelled")
        if x.services.clock.now() >= x.deadline():
            return self.fail("timeout", f"attempt {x.attempt.try_no} of step {x.step.id!r} ran out of time after "
                                        f"{self.turns} model turns", timed_out=True)
        limit = x.plan.budget.max_tokens
        used = x.run.tokens + self.unbilled()[0]
        if limit is not None and used >= limit:
            return self.fail("budget_exceeded",
                             f"the run has used {used} tokens of its budget of {limit}; raise "
                             "budget.max_tokens or shorten the goal", run_scope=True)
        return None

    def charge(self, result: Any) -> Failed | None:
        """Add one turn's tokens and cost; ``budget_exceeded`` when a token or cost budget is now exceeded."""
        x = self.x
        self.tokens += int(getattr(result, "total_tokens", 0) or 0)
        self.cost += float(getattr(result, "cost_usd", 0.0) or 0.0)
        new_tokens, new_cost, _ = self.unbilled()
        cap: float | None  # a count of tokens, then a cost in USD
        spent: float
        for scope, cap, spent in (("run", x.plan.budget.max_tokens, x.run.tokens + new_tokens),
                                  ("step", x.step.budget.max_tokens, self.tokens)):
            if cap is not None and spent > cap:
                return self.fail("budget_exceeded", f"the agent's model turns used {self.tokens} tokens, over the "
                                                    f"{scope}'s budget.max_tokens of {cap}", run_scope=scope == "run")
        for scope, cap, spent in (("run", x.plan.budget.max_cost_usd, x.run.cost_usd + new_cost),
                                  ("step", x.step.budget.max_cost_usd, self.cost)):
            if cap is not None and spent > cap:
                return self.fail("budget_exceeded",
                                 f"the agent's model turns cost ${self.cost:.4f}, over the {scope}'s "
                                 f"budget.max_cost_usd of ${cap:.4f}", run_scope=scope == "run")
        return None

    def call_limit(self) -> tuple[int | None, str, bool]:
        """The tool calls this attempt may make, what sets that limit, and whether it is the run's budget."""
        x = self.x
        limits = []
        if self.agent.max_tool_calls is not None:
            limits.append((self.agent.max_tool_calls, "agent.max_tool_calls", False))
        if x.step.budget.max_tool_calls is not None:
            limits.append((x.step.budget.max_tool_calls, "the step's budget.max_tool_calls", False))
        if x.plan.budget.max_tool_calls is not None:
            limits.append((max(0, x.plan.budget.max_tool_calls - x.run.tool_calls) + int(self.billed[2]),
                           f"what is left of the run's budget.max_tool_calls of {x.plan.budget.max_tool_calls}", True))
        return min(limits) if limits else (None, "", False)

    # -- one proposed call -------------------------------------------------------------------------
    def propose(self, proposed: Any) -> Outcome | None:
        name, arguments, call_id = unpack(proposed)
        number = len(self.calls) + 1
        entry = {"n": number, "tool": safe_name(name), "args": digest(arguments)}
        self.calls.append(entry)
        turn: dict[str, Any] = {"call": {"name": name, "arguments": arguments}}
        if call_id is not None:
            turn["call"]["id"] = call_id
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return self.refuse(entry, turn, "malformed_call",
                               "a tool call needs a tool name (text) and arguments (a map)")
        tool = self.tools.get(name)
        if tool is not None and tool.server is not None:  # an MCP tool: the audit names its server and tool
            entry.update(server=tool.server, mcp_tool=name.split(".", 2)[2])
        if tool is None:
            allowed = ", ".join(self.tools) or "(none)"  # actions, then MCP tools
            return self.refuse(entry, turn, "not_allowed", f"tool {name!r} is not allowed here; allowed: {allowed}")
        if tool.denied is not None:
            entry["outcome"] = f"denied:{tool.denied}"
            irreversible = tool.denied == "irreversible"
            why = ("it is irreversible and the step names no approvers for its tool calls (agent.approval); do "
                   "the irreversible effect in its own action step, or add approvers") if irreversible else \
                  (f"it needs permissions {sorted(set(tool.action.permissions) - set(self.x.step.permissions))} "
                   "that the step does not hold")
            return self.fail("policy_denied", f"the agent proposed a call to {name!r}, refused because {why}; "
                                              "nothing was run")
        problem = jsonschema_best(tool.validator, arguments)
        if problem is None and len(json.dumps(arguments, default=repr).encode()) > MAX_ARGUMENT_BYTES:
            problem = f"arguments over {MAX_ARGUMENT_BYTES} bytes of JSON"
        if problem is not None:
            problem = problem.replace("output does not match output_schema", "arguments do not match the tool's "
                                                                              "parameters")
            return self.refuse(entry, turn, "invalid_arguments", problem)
        limit, source, run_scope = self.call_limit()
        if limit is not None and self.tool_calls >= limit:
            entry["outcome"] = "budget_exceeded"
            return self.fail("budget_exceeded", f"the agent proposed tool call {self.tool_calls + 1}, over {source} "
                                                f"({limit}); the call was not run", run_scope=run_scope)
        if tool.approval:
            return approval.open_gate(self, tool, arguments, entry, turn)
        return self.execute(tool, arguments, entry, turn)

    def execute(self, tool: Tool, arguments: dict[str, Any], entry: dict[str, Any],
                turn: dict[str, Any]) -> Failed | None:
        x = self.x
        signature = f"{tool.name}:{entry['args']}"
        self.seen[signature] = occurrence = self.seen.get(signature, 0) + 1
        key = f"{self.base_key}:tool:{signature}:{occurrence}"
        if tool.action.effect != "read":
            entry["key"] = key
        own = json.loads(json.dumps(arguments, default=repr))
        self.tool_calls += 1
        self.in_a_row = 0
        act = tool.action

        def run_tool(ctx: StepContext) -> Any:
            return act(ctx, **own)

        def calling() -> Succeeded | Failed:
            return call(x, run_tool, key, act=act)

        outcome = calling() if tool.server is None else mcp.guarded(x, tool.server, calling)  # its breaker
        if isinstance(outcome, Failed):
            if outcome.timed_out:
                entry["outcome"] = "timeout"
                return self.fail("timeout", f"tool {tool.name!r} (call {entry['n']}) did not finish within the "
                                            f"attempt's timeout of {x.step.timeout_ms}ms", timed_out=True)
            entry["outcome"] = f"error:{outcome.error_class}"
            message = outcome.message
            if outcome.error_class == "internal":  # details are for operators, not for the model
                log.warning("agent tool %s (call %d of step %r, run %s) failed: %s", tool.name, entry["n"],
                            x.step.id, x.run.id, outcome.message)
                message = "the tool failed unexpectedly"
            turn.update(status="error", error={"class": outcome.error_class, "message": REDACTOR.text(message)})
            self.transcript.append(turn)
            return None
        try:
            text = json.dumps(outcome.output, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError):
            entry["outcome"] = "error:internal"
            turn.update(status="error", error={"class": "internal", "message": "the tool returned a value that is "
                                                                                 "not JSON"})
            self.transcript.append(turn)
            return None
        entry["outcome"] = "ok"
        result: Any = json.loads(text)
        if tool.server is not None:
            entry["result"] = mcp.result_digest(result)
        if len(text) > MAX_RESULT_CHARS:
            result = {"truncated": True, "chars": len(text), "preview": text[:MAX_RESULT_CHARS]}
        turn.update(status="ok", result=REDACTOR.value(result))  # a secret never reaches the model
        self.transcript.append(turn)
        return None

    def refuse(self, entry: dict[str, Any], turn: dict[str, Any], reason: str, message: str) -> Failed | None:
        entry["outcome"] = f"refused:{reason}"
        turn.update(status="refused", error={"class": reason, "message": message})
        self.transcript.append(turn)
        self.refusals += 1
        self.in_a_row += 1
        if self.in_a_row >= REFUSALS_IN_A_ROW:
            # the reasons only: a refusal's message may quote the arguments, which are the model's (untrusted) text
            reasons = ", ".join(c["outcome"].split(":", 1)[1] for c in self.calls[-self.in_a_row:])
            return self.fail("policy_denied", f"the agent proposed {self.in_a_row} refused tool calls in a row "
                                              f"({reasons}); nothing refused was run")
        return None

    # -- endings -----------------------------------------------------------------------------------
    def finish(self, output: Any) -> Outcome:
        x = self.x
        problem = schema_failure(x, self.agent.output_schema, output)
        if problem is not None:
            return self.fail("invalid_output", problem)
        failed = validation_failure(x, output)
        if failed is not None:
            return self.fail("invalid_output", failed.message)
        summary = self.summary("answer")
        tokens, cost, calls = self.unbilled()
        return Succeeded(output, tokens=tokens, cost_usd=cost, tool_calls=calls,
                         ledger_key=self.step_key, detail={"model": self.model, "agent": summary},
                         data={"agent": summary})

    def fail(self, error_class: str, message: str, retry_after: float | None = None, *,
             timed_out: bool = False, run_scope: bool = False) -> Failed:
        """The attempt's failure, with what it used and its transcript summary. A *run* budget ends the run
        (``ends_run``, as :mod:`sealflow.policy.budgets` does); a step budget may be routed by
        ``on_error``."""
        summary = self.summary(error_class)
        tokens, cost, calls = self.unbilled()
        failed = Failed(error_class, message, retry_after, timed_out=timed_out, tokens=tokens,
                        cost_usd=cost, tool_calls=calls, data={"agent": summary},
                        detail={"model": self.model, "agent": summary})
        if run_scope and hasattr(failed, "ends_run"):
            failed.ends_run = "failed"
        return failed

    def summary(self, finish: str) -> dict[str, Any]:
        out = {"turns": self.turns, "tool_calls": self.tool_calls, "refused": self.refusals, "finish": finish,
               "calls": [dict(c) for c in self.calls]}
        withheld = {t.name: t.denied for t in self.tools.values() if t.denied is not None}
        if withheld:
            out["withheld"] = withheld
        return out


def run(x: Execution) -> Outcome:
    """Execute one attempt of the agent step ``x``."""
    if x.step.agent is None:
        return Failed("configuration", f"step {x.step.id!r} is an agent step without an agent section")
    return AgentLoop(x).run()
