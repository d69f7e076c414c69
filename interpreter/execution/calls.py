"""Calling a step's Python code: an action, a model tool, a compensation.

:func:`call` runs ``fn(ctx)`` on a runner thread (or in a child process) within the attempt's
deadline, inside the sandbox (declared secrets resolved, a private temporary directory), and
classifies what goes wrong into an error class; an exception that is not a classified ``StepError`` keeps its
traceback with the failed attempt, and its message names where in the action's code it happened
(:mod:`sealflow.core.tracebacks`). Every step kind that calls code goes through it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sealflow.core.errors import StepError
from sealflow.core.outcomes import Failed, Succeeded
from sealflow.core.tracebacks import failure
from sealflow.execution import isolation, sandbox
from sealflow.execution.actions import Action
from sealflow.execution.context import Execution, StepContext
from sealflow.execution.leasewatch import LeaseWatch
from sealflow.execution.timeouts import AttemptTimedOut, WaitInterrupted


def own_args(args: dict[str, Any]) -> dict[str, Any]:
    """Arguments the action may mutate freely: maps and lists taken from earlier outputs are copied
    (they are shared with the engine's decoded-output cache)."""
    return {k: json.loads(json.dumps(v)) if isinstance(v, (dict, list)) else v for k, v in args.items()}


def call(x: Execution, fn: Callable[[StepContext], Any], key: str | None, *, act: Action | None = None,
         timeout_ms: int | None = None, cancellable: bool = True) -> Succeeded | Failed:
    """Run ``fn(ctx)`` on a runner thread within the attempt's deadline; classify what goes wrong.

    ``act``'s declared secrets are resolved into ``ctx.secrets`` and ``ctx.tempdir`` is removed when
    ``fn`` ends (:mod:`sealflow.execution.sandbox`); ``timeout_ms`` replaces the step's timeout
    (compensations);
    ``cancellable=False``: ``ctx.cancelled()`` reflects only this attempt timing out or losing its lease
    (:mod:`~sealflow.execution.leasewatch`); under ``isolation: process`` ``fn`` runs in a
    child process (:mod:`~sealflow.execution.isolation`)."""
    services = x.services
    run_id = x.run.id
    job_box: list[Any] = []
    lease = LeaseWatch(services.store, services.clock, x.attempt)  # a replaced attempt knows it

    def cancelled() -> bool:
        return (bool(job_box and job_box[0].abandoned) or lease.lost()
                or (cancellable and services.is_cancelled(run_id)))

    ctx = StepContext(x, key, cancelled)
    if timeout_ms is not None:
        ctx.deadline = services.clock.now() + timeout_ms / 1000.0
    try:
        box = sandbox.prepare(ctx, act, services)
    except StepError as exc:
        return Failed(exc.error_class, exc.message)
    timeout = max(0.0, ctx.deadline - services.clock.now())
    if isolation.mode_for(x.step, act, services.config) == "process":  # a child process per attempt
        return isolation.call_isolated(x, box, fn, ctx, timeout, cancelled, key)
    job = services.runner.submit(lambda: box.run(fn, ctx))
    job_box.append(job)
    try:
        output = services.runner.wait(job, timeout)
    except AttemptTimedOut:
        return Failed("timeout", f"attempt {x.attempt.try_no} of step {x.step.id!r} exceeded its timeout of "
                                 f"{x.step.timeout_ms}ms; the late result, if any, will be ignored", timed_out=True)
    except WaitInterrupted as stop:  # the waiting thread was interrupted (Ctrl-C): not the step's failure
        raise stop.interrupt from None
    except BaseException as exc:  # noqa: BLE001 - every failure is classified, even SystemExit
        error_class, message, retry_after, trace = failure(exc)
        over = box.failure()
        return Failed("policy_denied", over) if over else Failed(error_class, message, retry_after, trace=trace)
    over = box.failure()
    if over:
        return Failed("policy_denied", over)
    return Succeeded(output, ledger_key=key)
