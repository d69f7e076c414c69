"""The state store interface: the single source of truth of every run.

Every method that changes state is ONE atomic operation (a SQLite ``BEGIN
IMMEDIATE`` transaction; on Redis, one Lua script or MULTI/WATCH block), and
every change that involves a step attempt is fenced by that attempt's token:

* a message ``(run_id, step_id, attempt, token)`` is honoured only by
  :meth:`Store.claim`, which compares the token and the attempt's state and
  issues a *new* token (compare-and-set); anything else is refused and audited
  as ``message_refused``;
* :meth:`Store.commit` applies a step's result, the run's new state, counters,
  the idempotency ledger entry, the dead letter, the next attempt (with its
  outbox row or timer) and the audit events together, or nothing: a stale
  token raises :class:`FencingError`, a stale run revision
  :class:`ConcurrencyError`, an edge not in :mod:`interpreter.states`
  :class:`IllegalTransition` (audited, not applied).

Invariants the engine relies on (kept by these operations, checked by tests):

1. A run in ``queued``/``running``/``waiting``/``cancelling`` has exactly one
   *active* attempt (``scheduled``, ``running``, ``retry_wait`` or
   ``waiting``): its cursor.
2. A ``scheduled`` attempt has an outbox row until a worker claims it; a
   ``retry_wait`` attempt has a ``backoff`` timer; a ``waiting`` attempt has a
   ``wait`` or ``approval_timeout`` timer, or waits for a human with one; a
   ``running`` attempt has a lease that the sweeper expires.
3. The audit log is append-only; nothing updates or deletes it.

So a process killed at any instant leaves the store in a state from which the
sweeper and :meth:`Store.reset_dispatch` alone drive every run on.

Values that are JSON in the store (inputs, outputs, results) cross this
interface as JSON *text* (``*_json`` fields) so the engine encodes once and the
backend stores strings as they are; records read back are decoded.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, NamedTuple


class Message(NamedTuple):
    """What the broker carries: ids only."""

    run_id: str
    step_id: str
    attempt: int
    token: int


@dataclasses.dataclass(slots=True)
class RunRecord:
    id: str
    tenant: str
    workflow: str
    workflow_version: int
    plan_digest: str
    input: Any
    state: str
    rev: int
    initiator: str
    idempotency_key: str | None
    input_hash: str
    created_at: float
    updated_at: float
    deadline: float | None
    output: Any
    error_class: str | None
    error_message: str | None
    steps_executed: int
    tokens: int
    cost_usd: float
    tool_calls: int
    redrives: int
    cursor_step: str | None
    cursor_attempt: int | None
    priority: str = "normal"


@dataclasses.dataclass(slots=True)
class AttemptRecord:
    run_id: str
    step_id: str
    attempt: int
    try_no: int
    state: str
    token: int
    lease_owner: str | None
    lease_expires: float | None
    lease_ms: int
    scheduled_at: float | None
    started_at: float | None
    ended_at: float | None
    due_at: float | None
    output: Any
    error_class: str | None
    error_message: str | None
    data: dict


@dataclasses.dataclass(slots=True)
class Claimed:
    """A successful claim: the run, the attempt (with its new token) and the results so far."""

    run: RunRecord
    attempt: AttemptRecord
    #: step id -> (status, output JSON text or None), latest visit of each step
    results: dict[str, tuple[str, str | None]]
    #: the attempt was ``waiting`` (its timer fired), not freshly scheduled
    resumed: bool = False


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
    #: when the attempt goes ``waiting``: when its timer fires (None: waits for a human only)
    due_at: float | None = None
    #: replaces the attempt's ``data`` when not None
    data: dict | None = None
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
    data: dict | None = None


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
    detail: dict | None = None
    run_id: str | None = None  # only for standalone appends; commits use their run


@dataclasses.dataclass(frozen=True, slots=True)
class Commit:
    """Everything one step result changes, applied together or not at all."""

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


@dataclasses.dataclass(frozen=True, slots=True)
class Committed:
    rev: int
    run_state: str
    #: messages to enqueue now (``dispatch_inline``)
    messages: tuple[Message, ...] = ()


@dataclasses.dataclass(slots=True)
class SweepReport:
    leases_expired: int = 0
    timers_fired: int = 0
    redelivered: int = 0
    runs_timed_out: int = 0
    runs_touched: set = dataclasses.field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.leases_expired or self.timers_fired or self.redelivered or self.runs_timed_out)


@dataclasses.dataclass(frozen=True, slots=True)
class TimerRecord:
    id: int
    run_id: str
    step_id: str | None
    attempt: int | None
    token: int | None
    kind: str
    fire_at: float


@dataclasses.dataclass(frozen=True, slots=True)
class OutboxRecord:
    run_id: str
    step_id: str
    attempt: int
    token: int
    due_at: float
    sent_at: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class LedgerRecord:
    tenant: str
    key: str
    run_id: str
    step_id: str
    result: Any
    created_at: float


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetterRecord:
    run_id: str
    step_id: str | None
    reason: str
    error_class: str
    fingerprint: str
    redrive_count: int
    quarantined: bool
    status: str  # dead | redriven | quarantined
    created_at: float
    updated_at: float


@dataclasses.dataclass(frozen=True, slots=True)
class AuditRecord:
    id: int
    run_id: str | None
    step_id: str | None
    event: str
    actor: str
    state_before: str | None
    state_after: str | None
    detail: dict | None
    ts: float


class Store(abc.ABC):
    """Abstract state store. Every mutating method is one atomic operation."""

    url: str = ""

    # -- lifecycle -----------------------------------------------------------------------------
    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def schema_version(self) -> int: ...

    # -- plans and runs ------------------------------------------------------------------------
    @abc.abstractmethod
    def put_plan(self, digest: str, workflow: str, version: int, body_json: str, now: float) -> None:
        """Store a plan once under its digest (a second put of the same digest does nothing)."""

    @abc.abstractmethod
    def get_plan(self, digest: str) -> str:
        """The plan JSON stored under ``digest``; :class:`NotFound` if none."""

    @abc.abstractmethod
    def submit(self, new: NewRun, now: float) -> tuple[RunRecord, bool]:
        """Create a run ``queued`` with its first attempt scheduled; or, for a known
        idempotency key with the same input hash, return the existing run (``created`` False).
        The same key with another input raises :class:`IdempotencyConflict`."""

    @abc.abstractmethod
    def get_run(self, run_id: str) -> RunRecord: ...

    @abc.abstractmethod
    def list_runs(self, *, states: tuple[str, ...] | None = None, limit: int = 100) -> list[RunRecord]: ...

    @abc.abstractmethod
    def attempts(self, run_id: str) -> list[AttemptRecord]:
        """Every attempt of the run, oldest first."""

    @abc.abstractmethod
    def active_attempt(self, run_id: str) -> AttemptRecord | None: ...

    @abc.abstractmethod
    def results(self, run_id: str) -> dict[str, tuple[str, str | None]]:
        """Step id -> (status, output JSON text), the latest visit of each step."""

    # -- the step path -------------------------------------------------------------------------
    @abc.abstractmethod
    def claim(self, run_id: str, step_id: str, attempt: int, token: int, *, owner: str, now: float) -> Claimed:
        """Compare-and-set: take the attempt's lease with a new fencing token, or raise
        :class:`MessageRefused` (after auditing ``message_refused``)."""

    @abc.abstractmethod
    def commit(self, commit: Commit, now: float) -> Committed:
        """Apply ``commit`` atomically, fenced by ``commit.step.token`` and ``commit.expected_rev``."""

    @abc.abstractmethod
    def take_outbox(self, now: float, limit: int = 256) -> list[Message]:
        """Mark up to ``limit`` due, unsent outbox rows sent and return their messages."""

    @abc.abstractmethod
    def sweep(self, now: float, *, redeliver_after: float = 60.0, limit: int = 500) -> SweepReport:
        """Requeue expired leases, turn due timers into outbox rows (or time runs out), and
        re-send outbox rows sent more than ``redeliver_after`` seconds ago and never claimed."""

    @abc.abstractmethod
    def next_due(self, run_id: str, *, redeliver_after: float = 60.0) -> float | None:
        """The earliest time something of this run becomes due (timer, outbox row, lease
        expiry, redelivery); None when only a human can move it."""

    @abc.abstractmethod
    def reset_dispatch(self) -> int:
        """Mark every sent outbox row unsent (the in-memory broker that held them is gone)."""

    @abc.abstractmethod
    def expire_leases(self, owner: str, now: float) -> int:
        """End the leases held by ``owner`` now (it is known to be dead)."""

    @abc.abstractmethod
    def lease_owners(self) -> list[str]: ...

    @abc.abstractmethod
    def stalled_runs(self) -> list[str]:
        """Active runs without an active attempt (must never happen; recovery reports them)."""

    # -- operator actions ----------------------------------------------------------------------
    @abc.abstractmethod
    def cancel(self, run_id: str, now: float, *, actor: str, reason: str = "") -> RunRecord: ...

    @abc.abstractmethod
    def redrive(self, run_id: str, next_attempt: NextAttempt, now: float, *, actor: str,
                deadline: float | None) -> Committed:
        """Requeue a failed or timed-out run at ``next_attempt`` (on its original plan digest)."""

    # -- reads ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def ledger_get(self, tenant: str, key: str) -> LedgerRecord | None: ...

    @abc.abstractmethod
    def dead_letters(self, *, include_redriven: bool = False) -> list[DeadLetterRecord]: ...

    @abc.abstractmethod
    def dead_letter(self, run_id: str) -> DeadLetterRecord | None: ...

    @abc.abstractmethod
    def timers(self, run_id: str | None = None) -> list[TimerRecord]: ...

    @abc.abstractmethod
    def outbox(self, run_id: str | None = None) -> list[OutboxRecord]: ...

    @abc.abstractmethod
    def audit(self, run_id: str | None = None, *, limit: int | None = None) -> list[AuditRecord]: ...

    @abc.abstractmethod
    def append_audit(self, event: AuditEvent, now: float) -> None:
        """Append one event that goes with no state change (e.g. a fenced-off commit)."""
