"""Whether this process can continue a run: the check before an operator's act changes anything.

Approving, rejecting, cancelling, recovering or redriving a run in a process that then executes its next
steps (the embedded default: an in-process broker) used to change the run first and find out afterwards that
the process lacked an action module, a model or a trust policy: the approval was consumed, the next step
failed with ``configuration: unknown action`` and the run was dead-lettered. :func:`require_ready` asks first
and raises :class:`NotReady` -- nothing changed -- saying what is missing and how to provide it.

A process that does not execute steps itself (a runtime on a shared broker, whose workers do) is not checked:
the decision is recorded and the run waits for a worker that can continue it.
"""

from __future__ import annotations

from typing import Any

from sealflow.interpreter.store.errors import InvalidOperation

#: how to provide each kind of missing thing
HOW = {
    "action": "load the module that defines it: --actions MODULE, or name it under actions: in sealflow.yaml",
    "model": "define it under models: in the runtime configuration (--config FILE, config: in sealflow.yaml, "
             "or $SEALFLOW_CONFIG; docs/models.md)",
    "trust": "pass the trust policy the run was signed for: --trust POLICY, trust: in sealflow.yaml, "
             "or $SEALFLOW_TRUST (docs/trust.md)",
}


class NotReady(InvalidOperation):
    """This process cannot execute the run's next steps; nothing was changed."""

    def __init__(self, message: str, lacks: list[tuple[str, str]]):
        super().__init__(message)
        self.message = message
        #: (kind, name or reason) pairs: ("action", "crm.update"), ("model", "gpt-x"), ("trust", reason)
        self.lacks = lacks


def plan_actions(plan: Any) -> list[str]:
    """Every action name ``plan`` may call: action steps, compensations and agent tools, once each."""
    names: dict[str, None] = {}
    for _, step in plan.all_steps():  # fan-out sub-flows included
        if step.action:
            names[step.action] = None
        if step.compensate is not None:
            names[step.compensate.action] = None
        if step.agent is not None:
            names.update(dict.fromkeys(step.agent.tools))
    return list(names)


def plan_models(plan: Any) -> list[str]:
    """Every model name ``plan`` may call (ai and agent steps, their fallbacks), in order, once each."""
    names: dict[str, None] = {}
    for _, step in plan.all_steps():
        for spec in (step.ai, step.agent):
            if spec is not None:
                names.update(dict.fromkeys((spec.model, *getattr(spec, "fallback", ()))))
    return list(names)



def lacks(runtime: Any, run: Any) -> list[tuple[str, str]]:
    """What ``runtime`` lacks to execute the steps of ``run`` (empty: it can)."""
    plan = runtime.engine.plan(run.plan_digest)
    missing = [("action", name) for name in plan_actions(plan) if name not in runtime.registry]
    missing += [("model", name) for name in plan_models(plan) if name not in runtime.providers]
    gate = runtime.engine.trust_gate
    # a gate with no policy cannot verify a signed run: a lack. A policy that refuses the run is a verdict, not
    # a lack: the run fails at its next step (trustgate), as it must on every process.
    if gate is not None and gate.policy is None:
        reason = gate.refusal(run, runtime.store, runtime.clock.now())
        if reason is not None:
            missing.append(("trust", reason))
    return missing


def describe(run: Any, verb: str, missing: list[tuple[str, str]]) -> str:
    """The refusal: what this process lacks to continue ``run`` and how to provide each thing."""
    lines = [f"cannot {verb} run {run.id} ({run.workflow} v{run.workflow_version}) here: this process could not "
             "continue it, so nothing was changed"]
    for kind, name in missing:
        what = name if kind == "trust" else f"{kind} {name!r}"
        lines.append(f"  missing {what}: {HOW[kind]}" if kind != "trust" else f"  {what}: {HOW[kind]}")
    return "\n".join(lines)


def executes_here(runtime: Any) -> bool:
    """Whether this runtime executes the steps it makes due itself (the embedded, in-process broker)."""
    from dramatiq.brokers.stub import StubBroker

    return isinstance(runtime.broker, StubBroker)


def require_ready(runtime: Any, run_id: str, verb: str) -> None:
    """Raise :class:`NotReady` when this process would execute ``run_id``'s steps but lacks what they need."""
    if not executes_here(runtime):
        return
    run = runtime.store.get_run(run_id)
    missing = lacks(runtime, run)
    if missing:
        raise NotReady(describe(run, verb, missing), missing)


def require_ready_all(runtime: Any, run_ids: list[str], visible: list[str], verb: str) -> None:
    """:func:`require_ready` for every run in ``run_ids`` (``recover`` drives them all); a run the caller may
    not read is named only as "a run in flight", with what is missing."""
    if not executes_here(runtime):
        return
    shown = set(visible)
    for run_id in run_ids:
        run = runtime.store.get_run(run_id)
        missing = lacks(runtime, run)
        if not missing:
            continue
        if run_id in shown:
            raise NotReady(describe(run, verb, missing), missing)
        names = ", ".join(f"{kind} {name!r}" if kind != "trust" else "a trust policy" for kind, name in missing)
        raise NotReady(f"cannot {verb} here: a run in flight that you may not read needs {names}, which this "
                       "process lacks, so nothing was changed; ask an operator to run `sealflow recover` or a "
                       "worker with them", missing)
