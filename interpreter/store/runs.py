"""Reading runs back (one aggregate of the store): runs, attempts, results, plans, the fan-out's children,
the idempotency ledger, dead letters, timers and outbox rows. Nothing here changes state; the writes are
:class:`~sealflow.store.ledger.RunLedger`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from sealflow.store.records import (
    AttemptRecord,
    ChildRecord,
    DeadLetterRecord,
    LedgerRecord,
    OutboxRecord,
    RunQuery,
    RunRecord,
    TimerRecord,
)


@runtime_checkable
class RunReads(Protocol):
    """What a run is, was and holds: the reads of the status page, the CLI, the HTTP API and the engine."""

    def get_run(self, run_id: str) -> RunRecord:
        """The run; :class:`NotFound` if none."""

    def list_runs(self, *, states: tuple[str, ...] | None = None, limit: int = 100,
                  tenant: str | None = None) -> list[RunRecord]:
        """Runs oldest first, of the given states and ``tenant`` (None: every tenant)."""

    def query_runs(self, query: RunQuery) -> list[RunRecord]:
        """The runs of ``query.tenant`` that match its filters, newest first (``created_at``, then ``id``),
        strictly after ``query.after`` (keyset pagination), at most ``query.limit``."""

    def count_runs(self, query: RunQuery) -> dict[str, int]:
        """State -> how many runs of ``query.tenant`` match its filters, whatever its ``states`` and page."""

    def run_tags(self, run_id: str) -> dict[str, str]:
        """The tags run ``run_id`` was submitted with (name -> value; empty: none)."""

    def attempts(self, run_id: str) -> list[AttemptRecord]:
        """Every attempt of the run, oldest first."""

    def active_attempt(self, run_id: str) -> AttemptRecord | None:
        """The run's cursor attempt if it is active (scheduled, running, retry_wait, waiting), else None."""

    def results(self, run_id: str, only: Iterable[str] | None = None) -> dict[str, tuple[str, str | None]]:
        """Step id -> (status, output JSON text), the latest visit of each step (of the steps in ``only``;
        None: of every step)."""

    def run_usage(self, run_id: str) -> tuple[int, int, float, int, float | None]:
        """What a run has spent (steps, tokens, cost, tool calls) and its deadline."""

    def children(self, run_id: str, step_id: str | None = None, attempt: int | None = None, *,
                 offset: int = 0, limit: int = 100_000) -> list[ChildRecord]:
        """The fan-out child runs of ``run_id`` (of one step and attempt when given), in index order."""

    def child_counts(self, run_id: str) -> dict[tuple[str, int], dict[str, int]]:
        """``(step, attempt) -> {state: count}`` of the fan-out child runs of ``run_id``."""

    def fanout(self, run_id: str, step_id: str, attempt: int) -> dict[str, Any] | None:
        """The counters of a fan-out attempt (total, concurrency, tolerated, started, ended, failed, state)."""

    def get_plan(self, digest: str) -> str:
        """The plan JSON stored under ``digest``; :class:`NotFound` if none."""

    def stored_plans(self) -> list[tuple[str, int, str, float]]:
        """``(workflow, version, digest, stored_at)`` of every plan stored, by name, version, then time."""

    def plan_digests(self, workflow: str, version: int | None = None) -> list[tuple[str, int, float]]:
        """``(digest, version, stored_at)`` of the plans stored for ``workflow`` (and ``version``), newest first."""

    def ledger_get(self, tenant: str, key: str) -> LedgerRecord | None:
        """The idempotency ledger's entry of ``key`` in ``tenant`` (None: none)."""

    def dead_letters(self, *, include_redriven: bool = False) -> list[DeadLetterRecord]:
        """The dead letters (and the redriven ones when asked)."""

    def dead_letter(self, run_id: str) -> DeadLetterRecord | None:
        """The run's dead letter, if it has one."""

    def timers(self, run_id: str | None = None) -> list[TimerRecord]:
        """The timers (of ``run_id``; None: of every run)."""

    def outbox(self, run_id: str | None = None) -> list[OutboxRecord]:
        """The outbox rows (of ``run_id``; None: of every run)."""
