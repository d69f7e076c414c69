"""Run operations: which permission each needs, and the one decision every runtime operation asks.

A principal acts on a run only through :func:`authorize_run` (or asks :func:`may`), and what it is asked
is about the *principal*, never about a tenant the caller names:

* the principal must be a **member of the run's tenant** (hold a role there) and hold the operation's
  permission there (:class:`Operation`: ``runs:read``, ``runs:cancel``, ``runs:resolve``, ``dlq:read``,
  ``dlq:redrive``, ``audit:read``; roles grant them like any permission, wildcards included: ``runs:*``);
* the run's **initiator**, while still a member, may read (``runs:read``) and cancel (``runs:cancel``) its
  own runs without the permission;
* deciding an approval (``runs:decide``) needs membership only: the gate's approvers decide the rest
  (:mod:`sealflow.policy.approvals`);
* an **operator** -- a principal listed in the access policy's top-level ``operators`` -- may do every
  operation on every tenant's runs (deciding approvals excepted: it still needs to be an approver);
* in **open development mode** everything is allowed, as the run's ``access_mode`` records.

A tenant the caller names is only a narrowing claim: a run of another tenant is "no run" (``tenant_denied``).
A denial answers word for word like an unknown run id and is audited once: ``tenant_denied`` when the
principal is not a member of the run's tenant (or named another tenant), ``operation_denied`` when it is a
member without the permission. A caller passing no principal (``actor=None``) is trusted embedding code: only
its tenant claim narrows what it sees.
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from typing import Any

from sealflow.core.errors import SealflowError
from sealflow.policy.access import (
    AccessPolicyError,
    AccessProvider,
    holds,
    is_open,
)
from sealflow.store.audit import AuditLog
from sealflow.store.base import AuditEvent, RunRecord, Store
from sealflow.store.errors import NotFound
from sealflow.store.runs import RunReads


class Operation(StrEnum):
    """What a principal does to a run; the value is the permission it needs in the run's tenant."""

    READ = "runs:read"  # status, drive-and-show after an action
    CANCEL = "runs:cancel"
    DECIDE = "runs:decide"  # approve / reject: membership only; the gate decides who may
    RESOLVE = "runs:resolve"  # decide a lost attempt's unknown outcome (retry, succeeded, failed)
    DLQ_READ = "dlq:read"  # dlq list / show
    REDRIVE = "dlq:redrive"
    AUDIT_READ = "audit:read"  # audit RUN, audit verify of a tenant's chain


#: what a run's initiator may do to its own runs without holding the permission
INITIATOR_MAY = frozenset({Operation.READ, Operation.CANCEL})


@dataclasses.dataclass(frozen=True)
class Decision:
    """Whether the principal may; ``via`` says why (``open-development``, ``operator``, ``permission``,
    ``initiator``, ``membership``) or why not (``not_a_member``, ``missing_permission``, ``policy_unusable``)."""

    allowed: bool
    via: str

    def __bool__(self) -> bool:
        return self.allowed


def is_operator(access: AccessProvider, principal: str) -> bool:
    """Whether the policy names ``principal`` an operator (providers without ``is_operator`` have none)."""
    ask = getattr(access, "is_operator", None)
    if ask is None:
        return False
    try:
        return bool(ask(principal))
    except AccessPolicyError:
        return False


class OperatorOnly(SealflowError):
    """An operation on what every tenant of a store shares (its circuit breakers, its retention, its
    definition registry), asked by a principal the access policy does not name an operator."""


def require_operator(access: AccessProvider, principal: str, what: str) -> None:
    """Raise :class:`OperatorOnly` unless ``principal`` may act on ``what``, which every tenant of the store
    shares: open development mode and the access policy's ``operators`` may; a tenant's member may not, since
    the act reaches other tenants' runs."""
    if is_open(access) or is_operator(access, principal):
        return
    raise OperatorOnly(f"{principal} may not {what}: it is shared by every tenant of this store, so only an "
                       "operator of the access policy (its top-level `operators`) may")


def may(access: AccessProvider, run: RunRecord, principal: str, operation: Operation | str) -> Decision:
    """May ``principal`` do ``operation`` to ``run``? (see the module docstring). Never raises: a policy
    that cannot be used denies."""
    operation = Operation(operation)
    if is_open(access):
        return Decision(True, "open-development")
    if operation is not Operation.DECIDE and is_operator(access, principal):
        return Decision(True, "operator")
    try:
        perms = access.permissions(run.tenant, principal)
        member = bool(perms) or bool(access.roles(run.tenant, principal))
    except AccessPolicyError:
        return Decision(False, "policy_unusable")
    if not member:
        if operation is Operation.DECIDE and is_operator(access, principal):
            return Decision(True, "operator")  # it sees the run; the gate refuses it unless it is an approver
        return Decision(False, "not_a_member")
    if operation is Operation.DECIDE:
        return Decision(True, "membership")
    if holds(perms, operation.value):
        return Decision(True, "permission")
    if operation in INITIATOR_MAY and run.initiator == principal:
        return Decision(True, "initiator")
    return Decision(False, "missing_permission")


def may_see_tenant(access: AccessProvider, tenant: str | None, principal: str, operation: Operation | str) -> bool:
    """May ``principal`` do ``operation`` on runs of ``tenant`` in general (lists: ``dlq list``, ``audit
    verify``, ``recover``)? Open mode and operators: yes; else a member holding the permission."""
    operation = Operation(operation)
    if is_open(access) or is_operator(access, principal):
        return True
    if tenant is None:
        return False
    try:
        return holds(access.permissions(tenant, principal), operation.value)
    except AccessPolicyError:
        return False


def visible_runs(store: RunReads, access: AccessProvider, run_ids: list[str], *, tenant: str | None,
                 actor: str | None, operation: Operation | str = Operation.READ) -> list[str]:
    """The ids of ``run_ids`` of ``tenant`` (None: any) that ``actor`` may ``operation`` (None: trusted code,
    all). Nothing is audited: a list hides, it does not refuse."""
    out = []
    for run_id in run_ids:
        run = store.get_run(run_id)
        if tenant is not None and run.tenant != tenant:
            continue
        if actor is None or may(access, run, actor, operation):
            out.append(run_id)
    return out


def readable_chains(store: AuditLog, access: AccessProvider, principal: str, tenant: str | None = None
                    ) -> list[str | None] | None:
    """The audit chains ``principal`` may verify: every one (None) in open mode or for an operator; else the
    tenants with events where it holds ``audit:read`` (never the system chain nor unchained events), only
    ``tenant`` when one is named."""
    if is_open(access) or is_operator(access, principal):
        return None if tenant is None else [tenant]
    names = [tenant] if tenant is not None else sorted({t for t in (*store.audit_heads(), *store.audit_tenants())
                                                        if t})
    return [t for t in names if t and may_see_tenant(access, t, principal, Operation.AUDIT_READ)]


class RunHidden(NotFound):
    """A run the caller may not see, raised with exactly the words of :func:`unknown_run`. ``event`` is the
    audited denial (``tenant_denied``, ``operation_denied``) and ``reason`` its reason, for whoever counts
    denials (the HTTP API's metrics); neither is ever shown to the caller."""

    def __init__(self, message: str, event: str, reason: str):
        super().__init__(message)
        self.event = event
        self.reason = reason


def unknown_run(store: Store, run_id: str) -> NotFound:
    """The error for a run that does not exist -- word for word what the store says."""
    return NotFound(f"no run {run_id!r} in this store; `sealflow runs list` lists the runs you may see")


def authorize_run(store: Store, access: AccessProvider, now: float, run_id: str, *, actor: str | None,
                  tenant: str | None, operation: Operation | str) -> RunRecord:
    """The run, if ``actor`` may do ``operation`` to it and ``tenant`` (a claim; None: any) owns it.

    Otherwise the same :class:`NotFound` as for an unknown id (a :class:`RunHidden`, saying which denial to
    those who count them), with one audit event: ``tenant_denied`` (another tenant named, or the actor is no
    member of the run's tenant) or ``operation_denied``. With
    ``actor=None`` (trusted in-process code) only the tenant claim is checked."""
    operation = Operation(operation)
    run = store.get_run(run_id)  # an unknown id raises NotFound itself
    detail: dict[str, Any] = {"operation": operation.value}
    if tenant is not None and run.tenant != tenant:
        event, detail["tenant"], detail["reason"] = "tenant_denied", tenant, "another_tenant"
    elif actor is None:
        return run
    else:
        decision = may(access, run, actor, operation)
        if decision:
            return run
        event = "operation_denied" if decision.via == "missing_permission" else "tenant_denied"
        detail.update(tenant=run.tenant, reason=decision.via)
    store.append_audit(AuditEvent(event, None, actor or "unknown", run_id=run_id, detail=detail), now)
    raise RunHidden(str(unknown_run(store, run_id)), event, detail["reason"])


__all__ = ["Operation", "OperatorOnly", "Decision", "INITIATOR_MAY", "RunHidden", "require_operator", "authorize_run",
           "is_operator", "may", "may_see_tenant", "readable_chains", "unknown_run", "visible_runs"]
