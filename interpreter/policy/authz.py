"""Authorisation decisions: who may submit, who may still act, who may see a run.

* **submit** (:func:`authorize_submit`): the acting identity -- the caller, or
  the schedule's ``run_as`` service for a scheduled run -- must be a member of
  the tenant and hold every permission the workflow declares; otherwise
  :class:`Unauthorized` naming what is missing, nothing is created, and a
  ``submit_denied`` event is audited (no run id: there is no run);
* **reauthorisation** (:func:`reauthorize`): right before a step whose action
  is ``write``/``irreversible`` (or that says ``reauthorize: true``), the
  run's acting identity must still hold the step's permissions *now*; if not
  the step fails with ``unauthorized`` (never retried) before its effect runs,
  and ``reauthorization_denied`` is audited;
* **run operations** (:func:`scoped_run`, :mod:`sealflow.policy.operations`):
  the acting principal must be a member of the run's tenant holding the
  operation's permission (or its initiator, for reading and cancelling); a
  tenant the caller names only narrows. A refusal is told the run does not
  exist -- the same words as for an unknown run -- and ``tenant_denied`` or
  ``operation_denied`` is audited.

Decisions ask an :class:`~sealflow.policy.access.AccessProvider` at the moment they
are made; a provider that cannot answer (an unreadable policy file) denies.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sealflow.core.errors import StepError
from sealflow.core.kinds import traits_of
from sealflow.core.outcomes import Failed
from sealflow.policy.access import AccessPolicyError, AccessProvider, is_open, missing, mode_of
from sealflow.policy.operations import Operation, authorize_run, unknown_run
from sealflow.store.audit import AuditLog
from sealflow.store.base import AuditEvent, RunRecord, Store

if TYPE_CHECKING:
    from sealflow.dsl.plan import Plan, PlanStep
    from sealflow.execution.context import Execution

_EFFECT_RANK = {"read": 0, "write": 1, "irreversible": 2}


class Unauthorized(StepError):
    """A principal lacks a permission or role, or may not make this decision (error class ``unauthorized``)."""

    def __init__(self, message: str, *, missing: Iterable[str] = ()):
        super().__init__("unauthorized", message)
        self.missing = tuple(missing)


class PolicyRequired(AccessPolicyError):
    """A command that serves others (worker, serve, submit to a shared store) was started without a policy."""


def require_policy(access: AccessProvider, what: str) -> None:
    """Refuse to start ``what`` in open development mode (the hook for ``worker``, ``serve`` and
    ``submit`` to a shared store)."""
    if is_open(access):
        raise PolicyRequired(f"{what} refuses to start without an access policy: open development mode would let "
                             "any principal do anything on a shared store; pass --access FILE or set "
                             "SEALFLOW_ACCESS")


def member_permissions(access: AccessProvider, tenant: str, principal: str) -> tuple[frozenset[Any], bool]:
    """(permissions held, is a member of the tenant); an unusable policy raises :class:`Unauthorized`."""
    try:
        perms = access.permissions(tenant, principal)
        member = bool(perms) or bool(access.roles(tenant, principal))
    except AccessPolicyError as exc:
        raise Unauthorized(f"the access policy cannot be used, so nothing is allowed: {exc.message}") from None
    return perms, member


def acting_identity(plan: Plan, initiator: str, run_as: str | None) -> str:
    """Whose permissions a run acts with: ``run_as`` for a scheduled or event-started run (it must be the
    schedule's or the event trigger's ``run_as``), else the initiator."""
    if run_as is None:
        return initiator
    triggers = (plan.trigger.schedule, plan.trigger.event) if plan.trigger is not None else ()
    declared_all = [t["run_as"] for t in triggers if t and t.get("run_as")]  # a schedule's or an event's
    declared = run_as if run_as in declared_all else (declared_all[0] if declared_all else None)
    if declared != run_as:
        raise Unauthorized(f"{plan.name} v{plan.version} declares no schedule running as {run_as}"
                           + (f" (its schedule runs as {declared})" if declared else "")
                           + "; submit it as yourself, without run_as")
    return run_as


def authorize_submit(store: AuditLog, access: AccessProvider, now: float, plan: Plan, *, initiator: str,
                     tenant: str, run_as: str | None = None) -> str:
    """Check a submission; return the acting identity, or audit and raise :class:`Unauthorized`."""
    detail: dict[str, Any] = {"tenant": tenant, "workflow": plan.name, "version": plan.version,
                              "plan": plan.digest, "access": mode_of(access)}
    try:
        acting = acting_identity(plan, initiator, run_as)
        detail["acting_as"] = acting
        perms, member = member_permissions(access, tenant, acting)
    except Unauthorized as exc:
        detail.update(reason=exc.message, missing=list(plan.permissions))
        store.append_audit(AuditEvent("submit_denied", None, initiator, detail=detail), now)
        raise
    lacking = missing(perms, plan.permissions)
    if member and not lacking:
        return acting
    who = acting if acting == initiator else f"{initiator} (running as {acting})"
    if not member:
        message = (f"{who} is not a member of tenant {tenant!r}, so it cannot submit {plan.name} "
                   f"v{plan.version}" + (f", which needs: {', '.join(plan.permissions)}" if plan.permissions else ""))
        lacking = plan.permissions
    else:
        message = (f"{who} may not submit {plan.name} v{plan.version} in tenant {tenant!r}: missing "
                   f"permission{'s' if len(lacking) > 1 else ''} {', '.join(lacking)}; ask an administrator of "
                   "the access policy for a role that grants them")
    detail.update(reason="not_a_member" if not member else "missing_permissions", missing=list(lacking))
    store.append_audit(AuditEvent("submit_denied", None, initiator, detail=detail), now)
    raise Unauthorized(message, missing=lacking)


# ---------------------------------------------------------------- reauthorisation

def step_effect(registry: Any, step: PlanStep) -> str | None:
    """The effect of what the step calls, from the live registry: its action's, or for an agent the
    strongest of its tools' (its MCP tools' as declared); None for steps that call nothing."""
    if not traits_of(step.kind).has_effect:
        return None
    names: tuple[str, ...] = ()
    if step.kind == "action" and step.action:
        names = (step.action,)
    elif step.kind == "agent" and step.agent is not None:
        names = tuple(step.agent.tools)
    effects = [getattr(registry.get(name), "effect", "irreversible") for name in names]
    # (an action missing from the registry fails the step anyway; it counts as irreversible meanwhile)
    if step.kind == "agent" and step.agent is not None:  # MCP tools: the effect the definition declares
        effects += [t.effect for t in step.agent.mcp_tools or ()]
    effect = None
    for e in effects:
        if effect is None or _EFFECT_RANK.get(e, 2) > _EFFECT_RANK.get(effect, 2):
            effect = e
    return effect


def step_permissions(registry: Any, step: PlanStep) -> tuple[str, ...]:
    """The step's declared permissions, plus any its action needs in the live registry."""
    perms = list(step.permissions)
    if step.kind == "action" and step.action:
        act = registry.get(step.action)
        perms += list(getattr(act, "permissions", ()) or ())
    return tuple(dict.fromkeys(perms))


def reauthorize(access: AccessProvider, x: Execution) -> Failed | None:
    """``unauthorized`` when a fresh attempt of a sensitive step is no longer allowed by ``access`` (it is
    not run); the refusal is audited through the execution's store."""
    if x.resumed or x.gate:
        return None
    step, registry = x.step, x.services.registry
    effect = step_effect(registry, step)
    if not step.needs_reauthorization(effect):
        return None
    run = x.run
    acting = run.acting
    needed = step_permissions(registry, step)
    try:
        perms, member = member_permissions(access, run.tenant, acting)
        lacking = missing(perms, needed) if member else needed
        reason = None if member else "not_a_member"
    except Unauthorized as exc:
        lacking, reason, member = needed, exc.message, False
    if member and not lacking:
        return None
    detail = {"acting_as": acting, "tenant": run.tenant, "permissions": list(needed), "missing": list(lacking),
              "effect": effect, "access": mode_of(access), "reason": reason or "missing_permissions"}
    x.services.store.append_audit(AuditEvent("reauthorization_denied", x.step_id, acting, run_id=run.id,
                                             detail=detail), x.services.clock.now())
    if reason == "not_a_member":
        why = f"{acting} is no longer a member of tenant {run.tenant!r}"
    elif reason:
        why = reason
    else:
        why = f"{acting} no longer holds {', '.join(lacking)} in tenant {run.tenant!r}"
    return Failed("unauthorized", f"reauthorisation before step {step.id!r} failed: {why}; the step did not run")


# ---------------------------------------------------------------- tenant scope

def scoped_run(store: Store, access: AccessProvider, now: float, run_id: str, *, tenant: str | None,
               actor: str | None, operation: Operation | str) -> RunRecord:
    """The run, if ``actor`` may do ``operation`` to it (see :func:`sealflow.policy.operations.
    authorize_run`; ``actor=None``, trusted in-process code: only the ``tenant`` claim is checked)."""
    return authorize_run(store, access, now, run_id, actor=actor, tenant=tenant, operation=operation)


__all__ = ["Unauthorized", "PolicyRequired", "require_policy", "authorize_submit", "acting_identity", "reauthorize",
           "step_effect", "step_permissions", "scoped_run", "unknown_run", "member_permissions"]
