"""The records the store gives back: runs, attempts, claims, commits' results, timers, audit rows, tokens.

Plain dataclasses; JSON crosses as text. What a write hands the store (:class:`NewRun`, :class:`Commit` and its
parts) is in :mod:`.changes`, re-exported here: ``from sealflow.store.records import Commit`` works.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from sealflow.store.changes import (  # re-exported (__all__): the records of a write
    AuditEvent,
    CalledRun,
    ChildSpec,
    Commit,
    DeadLetterSpec,
    LedgerEntry,
    NewRun,
    NextAttempt,
    RunChange,
    Spawn,
    StepChange,
)

if TYPE_CHECKING:
    from sealflow.store.coordination import Grant


class Message(NamedTuple):
    """What the broker carries: ids only."""

    run_id: str
    step_id: str
    attempt: int
    token: int
    #: the run's tenant: a worker refuses a message whose tenant is not the run's
    tenant: str | None = None


class Due(NamedTuple):
    """An outbox row taken to be sent: its message and the priority of its run (which queue it goes to)."""

    message: Message
    priority: str


#: the ``item_index`` of a called workflow's run (a ``call`` step's one child): never an item's or a branch's position
CALL_INDEX = -1


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
    #: whose permissions the run acts with: its initiator, or a schedule's run_as service
    acting_as: str | None = None
    #: ``policy`` or ``open-development`` (no access policy was configured at submit)
    access_mode: str | None = None
    #: who signed the definition the run executes (a key id, ``sigstore:...``), or ``unsigned``
    signer: str | None = None
    #: a child run (an item of a ``map``, a branch of a ``parallel``): the run and step it belongs to
    parent_run_id: str | None = None
    parent_step_id: str | None = None
    parent_attempt: int | None = None
    #: the item's (or branch's) position, and the item itself (decoded; None for a branch)
    item_index: int | None = None
    item: Any = None

    @property
    def acting(self) -> str:
        """Whose permissions the run acts with: ``acting_as`` when set, else its initiator."""
        return self.acting_as or self.initiator

    @property
    def called(self) -> bool:
        """A called workflow's run (a ``call`` step's child): its own input, steps and budget, not its parent's."""
        return self.parent_run_id is not None and self.item_index == CALL_INDEX


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
    data: dict[str, Any]
    #: how many times this attempt's lease expired (its worker died or stalled): a claim of an attempt
    #: that lost its lease records ``worker_lost`` instead of running it again
    leases_lost: int = 0
    #: the traceback of the exception the attempt's code raised (:mod:`sealflow.core.tracebacks`),
    #: redacted and bounded; read by :meth:`Store.attempts` only (a claim or a cursor read leaves it None)
    error_trace: str | None = None


class LazyResults(Mapping[str, tuple[str, "str | None"]]):
    """A run's results (step id -> (status, output JSON text)), read from the store on first use.

    A claim hands these out instead of reading every earlier result inside its transaction: a step without
    expressions never reads them, and the engine narrows them to the steps the attempt's step names
    (:meth:`narrow`, :mod:`sealflow.engine.reads`), so a step's cost does not grow with the run's
    length. Reading later sees what the claim would have: while the claimed attempt holds its lease nothing
    else writes the run's results (they are written by the commit of the run's one active attempt).
    ``load(only)`` reads the results of the steps in ``only`` (None: all)."""

    __slots__ = ("_load", "_got", "_only")

    def __init__(self, load: Callable[[frozenset[str] | None], dict[str, tuple[str, str | None]]]):
        self._load = load
        self._got: dict[str, tuple[str, str | None]] | None = None
        self._only: frozenset[str] | None = None

    def narrow(self, only: frozenset[str] | None) -> None:
        """Read only the results of the steps in ``only`` (None: all of them), if none was read yet."""
        if self._got is None:
            self._only = only

    def _data(self) -> dict[str, tuple[str, str | None]]:
        if self._got is None:
            self._got = self._load(self._only)
        return self._got

    def __getitem__(self, key: str) -> tuple[str, str | None]:
        return self._data()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data())

    def __len__(self) -> int:
        return len(self._data())


@dataclasses.dataclass(slots=True)
class Claimed:
    """A successful claim: the run, the attempt (with its new token) and the results so far."""

    run: RunRecord
    attempt: AttemptRecord
    #: step id -> (status, output JSON text or None), latest visit of each step (a :class:`LazyResults`)
    results: Mapping[str, tuple[str, str | None]]
    #: the attempt was ``waiting`` (its timer fired), not freshly scheduled
    resumed: bool = False
    #: the lock and pool slots taken for this attempt (:class:`~sealflow.store.coordination.Grant`)
    grants: tuple[Grant, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class ChildRecord:
    """A child run as its fan-out step sees it."""

    id: str
    index: int
    state: str
    output: Any
    error_class: str | None
    error_message: str | None
    updated_at: float


@dataclasses.dataclass(frozen=True, slots=True)
class Committed:
    rev: int
    run_state: str
    #: messages to enqueue now (``dispatch_inline``)
    messages: tuple[Message, ...] = ()
    #: the next attempt, claimed for ``Commit.claim_as`` in the same transaction (its message is ``messages[0]``)
    claimed: Claimed | None = None


@dataclasses.dataclass(slots=True)
class SweepReport:
    leases_expired: int = 0
    timers_fired: int = 0
    redelivered: int = 0
    runs_timed_out: int = 0
    runs_touched: set[str] = dataclasses.field(default_factory=set)

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
    detail: dict[str, Any] | None
    ts: float
    #: the audit chain (:mod:`sealflow.store.auditchain`)
    tenant: str | None = None
    workflow: str | None = None
    workflow_version: int | None = None
    plan_digest: str | None = None
    decision: str | None = None
    tool: str | None = None
    summary: str | None = None
    error: str | None = None
    seq: int | None = None
    prev_hash: str | None = None
    hash: str | None = None


@dataclasses.dataclass(slots=True)
class ApiTokenRecord:
    """An API token as the store keeps it: never its secret, only the secret's hash."""

    id: str
    principal: str
    tenant: str
    created_at: float
    created_by: str
    expires_at: float | None = None
    revoked_at: float | None = None
    label: str | None = None
    secret_hash: str = dataclasses.field(default="", repr=False)

    def usable(self, now: float) -> bool:
        """Not revoked and not expired at ``now``."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)


@dataclasses.dataclass(frozen=True, slots=True)
class RunQuery:
    """Which runs :meth:`Store.query_runs` returns: filters, and a keyset position (``after``: the
    ``(created_at, id)`` of the last run of the previous page), newest first."""

    tenant: str
    workflow: str | None = None
    states: tuple[str, ...] | None = None
    initiator: str | None = None
    created_after: float | None = None
    created_before: float | None = None
    after: tuple[float, str] | None = None
    limit: int = 50
    #: the workflow's version (with or without ``workflow``)
    version: int | None = None
    #: (name, value) tags every run listed carries
    tags: tuple[tuple[str, str], ...] = ()


#: the module's own names and those it re-exports
__all__ = [
    "Message", "Due", "RunRecord", "AttemptRecord", "LazyResults", "Claimed", "ChildRecord", "Committed",
    "SweepReport", "TimerRecord", "OutboxRecord", "LedgerRecord", "DeadLetterRecord", "AuditRecord",
    "ApiTokenRecord", "RunQuery", "AuditEvent", "CALL_INDEX", "CalledRun",
    "ChildSpec", "Commit", "DeadLetterSpec", "LedgerEntry", "NewRun",
    "NextAttempt", "RunChange", "Spawn", "StepChange",
]
