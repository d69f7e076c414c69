"""Whether this process can continue a run: the check before an operator's act changes anything.

Approving, rejecting, recovering or redriving a run in a process that then executes its next
steps (the embedded default: an in-process broker) used to change the run first and find out afterwards that
the process lacked an action module, a model or a trust policy: the approval was consumed, the next step
failed with ``configuration: unknown action`` and the run was dead-lettered. :func:`require_ready` asks first
and raises :class:`NotReady` -- nothing changed -- saying what is missing and how to provide it.

A process that does not execute steps itself (a runtime on a shared broker, whose workers do) is not checked:
the decision is recorded and the run waits for a worker that can continue it. Cancelling is not checked either:
it runs no action, and the compensations it starts are left, like any step this process lacks, for a process
that has their actions (:mod:`sealflow.engine.capability`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sealflow.core.states import RUN_FINAL, STEP_ACTIVE
from sealflow.engine.capability import (
    HOW,
    chain_of,
    describe_lack,
    lacks_of,
    left_elsewhere,
    plan_lacks,
    plan_needs,
    secrets_missing,
    step_lacks,
)
from sealflow.store.errors import InvalidOperation, PlanTampered

if TYPE_CHECKING:
    from sealflow.runtime.status import RunStatus

__all__ = ["HOW", "NotReady", "describe", "lacks", "plan_actions", "plan_models", "require_ready"]


class NotReady(InvalidOperation):
    """This process cannot execute the run's next steps; nothing was changed."""

    def __init__(self, message: str, lacks: list[tuple[str, str]]):
        super().__init__(message)
        self.message = message
        #: (kind, name or reason) pairs: ("action", "crm.update"), ("model", "gpt-x"), ("secret", "crm_key"),
        #: ("trust", reason)
        self.lacks = lacks


def plan_actions(plan: Any) -> list[str]:
    """Every action name ``plan`` may call: action steps, compensations and agent tools, once each."""
    return plan_needs(plan)[0]


def plan_models(plan: Any) -> list[str]:
    """Every model name ``plan`` may call (ai and agent steps, their fallbacks), in order, once each."""
    return plan_needs(plan)[1]


def lacks(runtime: Any, run: Any) -> list[tuple[str, str]]:
    """What ``runtime`` lacks to execute the steps of ``run`` (empty: it can): actions, models, the secrets
    they declare, a trust policy (:func:`sealflow.engine.capability.plan_lacks`)."""
    return plan_lacks(runtime.engine, run)


def describe(run: Any, verb: str, missing: list[tuple[str, str]]) -> str:
    """The refusal: what this process lacks to continue ``run`` and how to provide each thing."""
    lines = [f"cannot {verb} run {run.id} ({run.workflow} v{run.workflow_version}) here: this process could not "
             "continue it, so nothing was changed"]
    lines += [f"  {describe_lack(kind, name)}" for kind, name in missing]
    return "\n".join(lines)


def note_left(runtime: Any, status: RunStatus, *, here: bool = True) -> RunStatus:
    """``status`` with what it waits for when its next step waits for a process that can run it
    (:mod:`sealflow.engine.capability`): ``{"kind": "process", "step", "lacks", "how",
    "left_here", "left_by", "lacks_here"}``. ``left_here``: this process left the step itself (while
    driving it); otherwise the run's current attempt is scheduled and due, nobody has claimed it, and this
    process lacks what it needs too (the same check as the claim's, computed from the run's plan), or other
    processes left it (``left_by``: who, from the store's ``step.left`` events, with what they lacked), so
    ``sealflow status`` in any process says why; ``lacks_here``: whether this process lacks it too.
    ``here=False`` (a process that does not execute steps: the HTTP API): only what the store says
    (``lacks_here`` None).

    A run in progress whose stored plan is not what its digest says (:mod:`sealflow.engine.integrity`),
    whatever holds it, says that instead: ``{"kind": "plan_tampered", "step", "plan", "reason", "how"}`` (the
    process that takes its next step refuses it); nothing else of its plan is read."""
    if status.run.state in RUN_FINAL:
        return status
    refusal = plan_refusal(runtime, status.run)
    if refusal is not None:
        current = next((a for a in reversed(status.attempts) if a.state in STEP_ACTIVE), None)
        status.waiting = {"kind": "plan_tampered", "step": None if current is None else current.step_id,
                          "plan": refusal.digest, "reason": str(refusal),
                          "how": f"{PENDING_TAMPERED}; {HOW_TAMPERED.format(run=status.run.id)}"}
        return status
    if status.waiting is not None:
        return status
    missing = runtime.engine.left.get(status.run.id) if here else None
    left_here = bool(missing)
    if left_here:
        due = next((a for a in reversed(status.attempts) if a.state == "scheduled"), None)
    else:
        due = next((a for a in status.attempts if a.state == "scheduled"
                    and (a.due_at is None or a.due_at <= runtime.clock.now())), None)
        if due is None:
            return status
        missing = step_lacks(runtime.engine, status.run, due.step_id) if here else []
    lacks_here = bool(missing)
    by = [] if due is None else left_elsewhere(runtime.store, status.run.id, due.step_id, due.attempt, runtime.owner)
    if not missing:
        missing = list(dict.fromkeys(lack for _, lacks_ in by for lack in lacks_))
        if not missing:
            return status
    status.waiting = {"kind": "process", "step": None if due is None else due.step_id,
                      "lacks": [list(lack) for lack in missing],
                      "how": [describe_lack(kind, name) for kind, name in missing], "left_here": left_here,
                      "left_by": [actor for actor, _ in by], "lacks_here": lacks_here if here else None}
    return status


def lacks_names(missing: list[tuple[str, str]]) -> str:
    """``action 'crm.update', model 'gpt-x'`` (a trust lack: "the trust policy the run was signed for")."""
    return ", ".join(f"{kind} {name!r}" if kind != "trust" else "the trust policy the run was signed for"
                     for kind, name in missing)


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


def require_ready_plan(runtime: Any, plan: Any) -> None:
    """Before ``sealflow run`` creates a run it will execute here: :class:`NotReady` when this process lacks
    an action, model or secret some step of ``plan`` needs (nothing is created)."""
    if not executes_here(runtime):
        return
    services = runtime.engine.services
    missing = lacks_of(*plan_needs(plan), services.registry, services.provider_for, services)
    if missing:
        lines = [f"cannot run {plan.name} v{plan.version} here: this process lacks what its steps need, so no run "
                 "was created"]
        raise NotReady("\n".join(lines + [f"  {describe_lack(kind, name)}" for kind, name in missing]), missing)


def unready(runtime: Any, run_ids: list[str],
            visible: list[str]) -> tuple[list[dict[str, Any]], list[tuple[str, str]], set[str]]:
    """The runs of ``run_ids`` this process would execute but cannot continue (``recover`` leaves them as they
    are): one entry per run the caller may read (``run_id``, ``workflow``, ``version``, ``lacks``, ``how``), and
    what the others (runs the caller may not read, never named) lack, once each, and the ids of them all.
    Nothing when this process does not execute steps itself (its workers do)."""
    if not executes_here(runtime):
        return [], [], set()
    shown = set(visible)
    left: list[dict[str, Any]] = []
    hidden: dict[tuple[str, str], None] = {}
    ids: set[str] = set()
    for run_id in run_ids:
        run = runtime.store.get_run(run_id)
        missing = lacks(runtime, run)
        if not missing:
            continue
        ids.add(run_id)
        if run_id not in shown:
            hidden.update(dict.fromkeys(missing))
            continue
        left.append({"run_id": run_id, "workflow": run.workflow, "version": run.workflow_version,
                     "lacks": [list(lack) for lack in missing],
                     "how": [describe_lack(kind, name) for kind, name in missing]})
    return left, list(hidden), ids


# -- a run whose stored plan is not what its digest says (engine/integrity.py) -------------------------

#: what to do about a run refused for its tampered plan ({run}: its id)
HOW_TAMPERED = ("restore that row of the store's plans table from a backup (or delete it and submit the definition "
                "again), then `sealflow dlq redrive {run}`")
#: what becomes of such a run still in progress
PENDING_TAMPERED = "the process that takes its next step fails it into the dead-letter list"


def plan_refusal(runtime: Any, run: Any) -> PlanTampered | None:
    """Why ``run``'s stored plan is not to be trusted (:class:`PlanTampered`), or None: it is what its digest
    says (:func:`sealflow.engine.integrity.load_plan`, through the engine's cache)."""
    try:
        runtime.engine.plan(run.plan_digest)
    except PlanTampered as exc:
        return exc
    return None


def require_trusted(runtime: Any, run_id: str, verb: str) -> None:
    """Before an operator's act that would use ``run_id``'s plan (approve, reject, resolve, cancel, redrive):
    :class:`PlanTampered` naming the act and the run when that plan is not what its digest says; nothing is
    changed (the act would have taken its steps, gates or compensations from it)."""
    run = runtime.store.get_run(run_id)
    refusal = plan_refusal(runtime, run)
    if refusal is not None:
        raise refusal.refusing(f"{verb} run {run.id} ({run.workflow} v{run.workflow_version})")


def refused_entry(run: Any, exc: PlanTampered) -> dict[str, Any]:
    """``recover``'s entry for a run refused for its tampered plan."""
    return {"run_id": run.id, "workflow": run.workflow, "version": run.workflow_version, "plan": exc.digest,
            "reason": str(exc), "how": HOW_TAMPERED.format(run=run.id)}


# -- readiness of the process: the secrets it needs -------------------------------------------------

def missing_secrets(runtime: Any, *, files: bool = True) -> list[tuple[str, str]]:
    """``(secret, where it is referenced)`` for every secret this process needs and cannot resolve: the
    ``api_key`` of each model the runtime configuration defines, each secret an action it loaded declares
    (those it executes), the ``{secret: NAME}`` values of each MCP server's ``env`` and ``headers``, and the URL
    and signing secret of each approval notification channel (its deliverer posts to them). Names only, never a
    value; empty when every one resolves. ``files=False`` leaves out the paths of the configuration and the
    action modules (``/readyz`` answers anonymous callers)."""
    from sealflow.providers.config import parse_models

    services = runtime.engine.services
    source = f" in {runtime.config.source or 'the runtime configuration'}" if files else ""
    refs: dict[str, list[str]] = {}
    for name, model in parse_models(runtime.config.extra.get("models"), source=runtime.config.source).items():
        if model.api_key_secret:
            refs.setdefault(model.api_key_secret, []).append(f"api_key of model {name!r}{source}")
    notify = getattr(runtime, "notify", None)
    for name, channel in (notify.channels.items() if notify is not None else ()):
        where = f"notification channel {name!r} (notifications.channels.{name}){source}"
        if channel.url_secret:
            refs.setdefault(channel.url_secret, []).append(f"url of {where}")
        if channel.secret:
            refs.setdefault(channel.secret, []).append(f"signing secret of {where}")
    from sealflow.execution.mcp.servers import servers_of

    for name, server in servers_of(runtime.config).items():
        for secret in server.secrets:
            refs.setdefault(secret, []).append(f"env or headers of MCP server {name!r} (mcp.{name}){source}")
    for name, act in services.registry.items():
        code = getattr(act.fn, "__code__", None)
        where = f" in {code.co_filename if code is not None else act.fn.__module__}" if files else ""
        for secret in act.secrets:
            refs.setdefault(secret, []).append(f"declared by action {name!r}{where}")
    missing = set(secrets_missing(list(refs), chain_of(services))) if refs else set()
    return [(secret, where) for secret, places in refs.items() if secret in missing for where in places]


def describe_missing_secrets(missing: list[tuple[str, str]]) -> str:
    """One line per missing secret: its name, where it is referenced, and how to provide it."""
    from sealflow.execution.secrets import env_name

    return "\n".join(f"secret {secret!r} ({where}) is not set: set {env_name(secret)} or add the file {secret!r} "
                     "to the secrets folder (secrets.dir, $SEALFLOW_SECRETS_DIR)" for secret, where in missing)
