"""``action``: call a registered Python action with the rendered ``with:`` arguments.

With an ``idempotency_key`` the effect runs once per key: the ledger is read
first, and a recorded result is returned without calling the action (a retry,
a duplicate message, a recovery after a crash); a fresh result is recorded in
the same commit as the step's success. The action runs on a runner thread
bounded by the attempt's timeout. Its arguments are checked against its signature first, and its result
against its declared output schema (:mod:`sealflow.execution.arguments`).
"""

from __future__ import annotations

from sealflow.core.outcomes import Failed, Outcome, Succeeded
from sealflow.dsl import expressions
from sealflow.execution import arguments
from sealflow.execution.calls import call, own_args
from sealflow.execution.context import Execution
from sealflow.execution.idempotency import ledger_lookup
from sealflow.steps.sections import section


def execute(x: Execution) -> Outcome:
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
        outcome = ledger_lookup(x, key)
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
