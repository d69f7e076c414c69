"""What a write hands the store: a new run, and the :class:`Commit` of one step result with its parts.

The records a write takes (frozen dataclasses; JSON crosses as text): the attempt's change
(:class:`StepChange`), the run's (:class:`RunChange`), the next attempt (:class:`NextAttempt`), the
idempotency ledger entry, the dead letter, audit events, the child runs a fan-out starts (:class:`Spawn`).
What the store gives back (runs, attempts, claims, audit rows, ...) is in :mod:`.records`, which re-exports
these names too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from sealflow.store.deliveries import NewDelivery


@dataclasses.dataclass(frozen=True, slots=True)
class NewRun:
    id: str
    tenant: str
    workflow: str
    workflow_version: int
    plan_digest: str
    plan_json: str
    input_json: str
    input_hash: str
    initiator: str
    idempotency_key: str | None
    deadline: float | None
    first_step: str
    first_lease_ms: int
    priority: str = "normal"
    acting_as: str | None = None
    access_mode: str | None = None
    #: who signed the definition (a key id, ``sigstore:...``), or ``unsigned`` (development mode)
    signer: str | None = None
    #: the submitter's tags (name -> value, checked: store/sql/tags.py), written with the run
    tags: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class StepChange:
    """The new state of the attempt a commit is fenced by."""

    step_id: str
    attempt: int
    token: int
    state: str
    output_json: str | None = None
    error_class: str | None = None
    error_message: str | None = None
    #: the traceback of the exception the attempt's code raised (kept when set; None keeps what is stored)
    error_trace: str | None = None
    #: when the attempt goes ``waiting``: when its timer fires (None: waits for a human only)
    due_at: float | None = None
    #: replaces the attempt's ``data`` when not None
    data: dict[str, Any] | None = None
    #: a timer on this same attempt: ``wait`` or ``approval_timeout``
    timer_kind: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class NextAttempt:
    """A new attempt row, the run's next cursor."""

    step_id: str
    try_no: int
    state: str  # scheduled | retry_wait | waiting
    due_at: float
    lease_ms: int
    #: backoff (retry_wait), approval_timeout (a gate opened in waiting), or None
    timer_kind: str | None = None
    data: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class RunChange:
    state: str | None = None
    output_json: str | None = None
    error_class: str | None = None
    error_message: str | None = None
    add_steps: int = 0
    add_tokens: int = 0
    add_cost_usd: float = 0.0
    add_tool_calls: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class LedgerEntry:
    tenant: str
    key: str
    run_id: str
    step_id: str
    result_json: str


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetterSpec:
    step_id: str | None
    reason: str
    error_class: str
    fingerprint: str


@dataclasses.dataclass(frozen=True, slots=True)
class AuditEvent:
    event: str
    step_id: str | None = None
    actor: str = "system"
    state_before: str | None = None
    state_after: str | None = None
    detail: dict[str, Any] | None = None
    run_id: str | None = None  # only for standalone appends; commits use their run
    #: the audit chain's columns (:mod:`sealflow.store.auditchain`); the tenant defaults to the run's,
    #: else ``detail["tenant"]``; the decision to ``deny`` for ``*_denied`` / ``*_refused`` events
    tenant: str | None = None
    decision: str | None = None
    tool: str | None = None
    summary: str | None = None
    error: str | None = None

    def chain_fields(self) -> dict[str, Any] | None:
        """The chain columns this event sets explicitly (None: all derived)."""
        if self.tenant is None and self.decision is None and self.tool is None and self.summary is None \
                and self.error is None:
            return None
        return {"tenant": self.tenant, "decision": self.decision, "tool": self.tool, "summary": self.summary,
                "error": self.error}


@dataclasses.dataclass(frozen=True, slots=True)
class ChildSpec:
    """One child run a fan-out step starts: its position, plan, first step and item (JSON text)."""

    index: int
    plan_digest: str
    first_step: str
    first_lease_ms: int
    item_json: str = "null"
    #: a called workflow's run (a ``call`` step's child, index ``CALL_INDEX``): its own name, version and input
    call: CalledRun | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class CalledRun:
    """What a ``call`` step's child run is, beyond a fan-out child: another workflow, with its own input."""

    workflow: str
    version: int
    input_json: str
    input_hash: str
    #: when the child's own ``budget.max_runtime`` ends (None: it declares none; its caller's still bounds it)
    deadline: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Spawn:
    """The child runs a fan-out attempt creates in its own commit (:mod:`sealflow.store.sql.children`):
    the first ``concurrency`` queued, the rest pending until a sibling ends."""

    children: tuple[ChildSpec, ...]
    concurrency: int
    #: how many children may fail before the parent is woken to fail the step
    tolerated: int
    #: (digest, workflow, version, plan JSON) of the children's plans, stored once
    plans: tuple[tuple[str, str, int, str], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Commit:
    """Everything one step result changes, applied together or not at all (keyword arguments only)."""

    run_id: str
    expected_rev: int
    step: StepChange | None = None
    run: RunChange = RunChange()
    next: NextAttempt | None = None
    ledger: LedgerEntry | None = None
    dead_letter: DeadLetterSpec | None = None
    audit: tuple[AuditEvent, ...] = ()
    actor: str = "system"
    #: insert the next attempt's outbox row as already sent and return its message, so the
    #: committing worker enqueues it at once (the sweeper re-sends it if the process dies first)
    dispatch_inline: bool = False
    #: notification deliveries of the approval gate this commit opens, written in its transaction
    notifications: tuple[NewDelivery, ...] = ()
    #: a worker (this owner) goes on with the run: claim the next attempt for it in the same transaction
    #: when it is the one message made due (no lock, pool or bulkhead to wait for: the engine asks only then)
    claim_as: str | None = None
    #: child runs the attempt starts (a ``map`` or ``parallel`` step going ``waiting``)
    spawn: Spawn | None = None
    #: the attempt is a fan-out step's and it ends: its children still in flight are cancelled
    close_fanout: bool = False
    #: completed children whose compensation starts with this commit: (child run id, first compensation)
    undo_children: tuple[tuple[str, NextAttempt], ...] = ()
    #: how many completed children the undo was decided on (None: nothing to undo); another count at commit
    #: time (a child completed meanwhile) is a conflict: decide again
    undo_seen: int | None = None
    #: the engine's view of the run at ``expected_rev`` and of the attempt: (run state, tenant, parent run id,
    #: attempt state). When given, the commit is written on it and checked against the store's before it
    #: returns (refused like a stale commit when they differ), instead of read first: one round trip fewer
    seen: tuple[str, str, str | None, str] | None = None
    #: False when the attempt's step can hold no lock or pool slot (it declares none, nor does its workflow):
    #: its end then has no slots to give back, and the store does not look for any
    holds_slots: bool = True
    #: False when the attempt's step can hold no usage reservation (only model and agent steps reserve their
    #: worst case against the tenant's quota): the store then has none to drop
    holds_reservation: bool = True
    #: the run as the engine holds it (its record at ``expected_rev``): the next attempt claimed for ``claim_as``
    #: comes with this record's unchanging fields (id, tenant, input decoded once, ...) and only the changing
    #: ones read back, instead of the whole row read and decoded again at every step (None: read it whole)
    carry_from: Any = None  # a records.RunRecord (records imports this module)
