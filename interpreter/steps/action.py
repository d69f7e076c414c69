"""``action``: call a registered Python action with the rendered ``with:`` arguments.

With an ``idempotency_key`` the effect runs once per key: the ledger is read
first, and a recorded result is returned without calling the action (a retry,
a duplicate message, a recovery after a crash); a fresh result is recorded in
the same commit as the step's success. The action runs on a runner thread
bounded by the attempt's timeout.
"""

from __future__ import annotations

import json

from sealflow.dsl import expressions

from sealflow.interpreter.execution.context import Execution, StepContext
from sealflow.interpreter.execution import sandbox
from sealflow.interpreter.core.errors import StepError, classify
from sealflow.interpreter.execution.idempotency import ledger_lookup
from sealflow.interpreter.core.outcomes import Failed, Outcome, Succeeded
from sealflow.interpreter.execution.timeouts import AttemptTimedOut


def execute(x: Execution) -> Outcome:
    name = x.step.action
    act = x.services.registry.get(name)
    if act is None:
        return Failed("configuration", f"unknown action {name!r}: load the module that defines it "
                                       f"(--actions pkg.module) or register it on the runtime's registry")
    args = _own(x.render(x.step.args)) if x.step.args else {}
    key = None
    if x.step.idempotency_key:
        key = expressions.to_text(x.render(x.step.idempotency_key))
        recorded = ledger_lookup(x, key)
        if recorded is not None:
            return recorded
    return call(x, lambda ctx: act(ctx, **args), key, act=act)


def _own(args: dict) -> dict:
    """Arguments the action may mutate freely: maps and lists taken from earlier outputs are copied
    (they are shared with the engine's decoded-output cache)."""
    return {k: json.loads(json.dumps(v)) if isinstance(v, (dict, list)) else v for k, v in args.items()}


def call(x: Execution, fn, key: str | None, *, act=None, timeout_ms: int | None = None,
         cancellable: bool = True) -> Outcome:
    """Run ``fn(ctx)`` on a runner thread within the attempt's deadline; classify what goes wrong.

    ``act``'s declared secrets are resolved into ``ctx.secrets`` and ``ctx.tempdir`` is removed when
    ``fn`` ends (:mod:`sealflow.interpreter.execution.sandbox`); ``timeout_ms`` replaces the step's timeout (compensations);
    ``cancellable=False``: ``ctx.cancelled()`` reflects only this attempt timing out."""
    services = x.services
    run_id = x.run.id
    job_box: list = []

    def cancelled() -> bool:
        return bool(job_box and job_box[0].abandoned) or (cancellable and services.is_cancelled(run_id))

    ctx = StepContext(x, key, cancelled)
    if timeout_ms is not None:
        ctx.deadline = services.clock.now() + timeout_ms / 1000.0
    try:
        box = sandbox.prepare(ctx, act, services)
    except StepError as exc:
        return Failed(exc.error_class, exc.message)
    timeout = max(0.0, ctx.deadline - services.clock.now())
    job = services.runner.submit(lambda: box.run(fn, ctx))
    job_box.append(job)
    try:
        output = services.runner.wait(job, timeout)
    except AttemptTimedOut:
        return Failed("timeout", f"attempt {x.attempt.try_no} of step {x.step.id!r} exceeded its timeout of "
                                 f"{x.step.timeout_ms}ms; the late result, if any, will be ignored", timed_out=True)
    except BaseException as exc:  # noqa: BLE001 - every failure is classified, even SystemExit
        error_class, message, retry_after = classify(exc)
        over = box.failure()
        return Failed("policy_denied", over) if over else Failed(error_class, message, retry_after)
    over = box.failure()
    if over:
        return Failed("policy_denied", over)
    return Succeeded(output, ledger_key=key)
