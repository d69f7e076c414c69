"""``action``: call a registered Python action with the rendered ``with:`` arguments.

With an ``idempotency_key`` the effect runs once per key: the ledger is read
first, and a recorded result is returned without calling the action (a retry,
a duplicate message, a recovery after a crash); a fresh result is recorded in
the same commit as the step's success. The action runs on a runner thread
bounded by the attempt's timeout. Its arguments are checked against its signature first, and its result
against its declared output schema (:mod:`sealflow.execution.arguments`).

With ``callback:`` the action gets ``ctx.callback`` (a URL and a single-use token: :mod:`sealflow.execution.callbacks`)
and returns at once; the step then waits for the result posted with the token (:mod:`sealflow.runtime.hearing`), or
fails with ``timeout`` when the callback's timeout passes (retried as its retry class says: a new attempt, a new
token). Its idempotency key goes to the action (``ctx.idempotency_key``) but the ledger is not read: the step's
result is the callback's, not the action's return value.
"""

from __future__ import annotations

from sealflow.core.outcomes import Failed, Outcome, Succeeded, Waiting
from sealflow.dsl import expressions
from sealflow.dsl.durations import format_ms
from sealflow.execution import arguments, callbacks
from sealflow.execution.calls import call, own_args
from sealflow.execution.context import Execution
from sealflow.execution.idempotency import ledger_lookup
from sealflow.steps.sections import section


def execute(x: Execution) -> Outcome:
    if x.step.callback is not None:
        return _with_callback(x)
    return _call(x)


def _with_callback(x: Execution) -> Outcome:
    spec = x.step.callback
    assert spec is not None
    waited = x.attempt.data.get(callbacks.CALLBACK)
    if x.resumed and isinstance(waited, dict):  # the callback's timer fired: nothing was posted in time
        return Failed("timeout", f"no callback for step {x.step.id!r} within {format_ms(spec.timeout_ms)}")
    handle, token_digest = callbacks.issue(x.run.id, x.step_id, x.attempt.attempt,
                                           callbacks.base_url(x.services.config))
    x.callback = handle
    outcome = _call(x, ledger=False)
    if not isinstance(outcome, Succeeded):
        return outcome
    expires = x.now + spec.timeout_ms / 1000.0
    return Waiting(expires, "wait", {callbacks.CALLBACK: {"digest": token_digest, "expires_at": expires,
                                                         "accepted": outcome.output}},
                   event="callback.waiting", detail={"token": callbacks.shown(token_digest),
                                                     "timeout_ms": spec.timeout_ms})


def _call(x: Execution, *, ledger: bool = True) -> Outcome:
    name = section(x, x.step.action, "action")
    act = x.services.registry.get(name)
    if act is None:
        return Failed("configuration", f"unknown action {name!r}: load the module that defines it "
                                       f"(--actions pkg.module) or register it on the runtime's registry")
    args = own_args(x.render(x.step.args)) if x.step.args else {}
    key = None
    outcome: Outcome | None = None
    if x.step.idempotency_key:
        key = expressions.to_text(x.render(x.step.idempotency_key))
        outcome = ledger_lookup(x, key) if ledger else None
    if outcome is None:
        args, wrong = arguments.prepare(act, x.step.args or {}, args)
        if wrong is not None:
            return Failed("invalid_request", f"step {x.step.id!r}: {wrong}")
        outcome = call(x, lambda ctx: act(ctx, **args), key, act=act)
    if isinstance(outcome, Succeeded):  # a replayed result too: it is what the step produces
        broken = arguments.check_output(act, outcome.output)
        if broken is not None:
            # the effect happened: record it, so a retry replays it rather than acting again
            return Failed("invalid_output", f"step {x.step.id!r}: {broken}", ledger_key=outcome.ledger_key,
                          ledger_output=outcome.output if outcome.ledger_key else None)
    return outcome
