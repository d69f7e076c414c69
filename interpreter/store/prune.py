"""Retention: delete finished runs older than a cutoff, keeping the audit chain verifiable.

A mixin of :class:`~sealflow.store.sql.store.SqlStore` (the statement code of both SQL
backends). :meth:`PruneMixin.prune_runs` removes, in batches of one transaction
each, the runs in a final state (completed, failed, cancelled, timed out, quarantined) whose last
change is older than ``before``, with everything that hangs off them: attempts, results, outbox rows,
timers, ledger entries, slot rows, and their dead letter once handled (a run still in the dead-letter
queue stays, unless ``include_dead_letters``: an operator may want to redrive it).

The audit log is append-only and is *not* pruned: it stays the record of what happened, and
``sealflow audit verify`` stays green. Each batch appends one ``store.pruned`` checkpoint event to the
chain of every tenant it touched, carrying how many runs went, the cutoff, and the sha256 of what was
deleted (the canonical JSON of the run rows, in id order), so the chain itself attests to the pruning
and a backup of the rows can be checked against it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sealflow.core.states import RUN_FINAL

#: runs per transaction: a batch keeps the write lock for a short moment only
BATCH = 200
_FINAL = "(" + ",".join(f"'{s}'" for s in sorted(RUN_FINAL)) + ")"
_DEPENDENT = ("attempts", "results", "outbox", "timers", "ledger", "slot_holders", "slot_waiters", "dead_letters",
              "notifications", "fanouts", "run_tags")
#: a fan-out child goes with its parent: never while the parent run is still in progress (it reads its children)
_CHILD_DONE = (f" AND (parent_run_id IS NULL OR NOT EXISTS (SELECT 1 FROM runs p WHERE p.id = runs.parent_run_id "
               f"AND p.state NOT IN {_FINAL}))")
_ROW = ("id, tenant, workflow, workflow_version, plan_digest, state, rev, initiator, input_hash, created_at, "
        "updated_at, output, error_class, error_message")


@dataclasses.dataclass
class PruneReport:
    """What a prune removed: runs per tenant, and the checkpoint hash appended to each tenant's chain."""

    before: float
    runs: dict[str, int] = dataclasses.field(default_factory=dict)
    hashes: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    kept_dead_letters: int = 0

    @property
    def total(self) -> int:
        return sum(self.runs.values())


def digest(rows: list[tuple[Any, ...]]) -> str:
    """The sha256 of pruned run rows (canonical JSON, in id order): what a checkpoint event carries."""
    body = json.dumps(sorted(rows, key=lambda r: r[0]), separators=(",", ":"), ensure_ascii=False, default=str)
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


class PruneMixin:
    """Expects ``_tx``, ``_read`` and ``_audit`` from the store."""

    if TYPE_CHECKING:  # the store's, which this is mixed into (sealflow.store.sql.store.SqlStore)
        def _tx(self) -> AbstractContextManager[Any]: ...

        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]: ...

        def _audit(self, c: Any, now: float, run_id: str | None, step_id: str | None, event: str,
                   actor: str = "system", before: str | None = None, after: str | None = None,
                   detail: dict[str, Any] | None = None, chain: dict[str, Any] | None = None) -> None: ...

    def prune_runs(self, before: float, now: float, *, actor: str = "system", include_dead_letters: bool = False,
                   batch: int = BATCH, dry_run: bool = False) -> PruneReport:
        """Delete finished runs last changed before ``before`` (see the module docstring)."""
        report = PruneReport(before=before)
        keep_dead = _CHILD_DONE + ("" if include_dead_letters else
                                   " AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.run_id = runs.id AND "
                                   "d.status <> 'redriven')")
        select = (f"SELECT {_ROW} FROM runs WHERE state IN {_FINAL} AND updated_at < ?{keep_dead} "
                  "ORDER BY updated_at, id LIMIT ?")
        if not include_dead_letters:
            report.kept_dead_letters = self._read(
                f"SELECT count(*) FROM runs WHERE state IN {_FINAL} AND updated_at < ? AND EXISTS (SELECT 1 FROM "
                "dead_letters d WHERE d.run_id = runs.id AND d.status <> 'redriven')", (before,))[0][0]
        if dry_run:
            for (tenant, n) in self._read(f"SELECT tenant, count(*) FROM runs WHERE state IN {_FINAL} AND "
                                          f"updated_at < ?{keep_dead} GROUP BY tenant", (before,)):
                report.runs[tenant] = n
            return report
        while True:
            with self._tx() as c:
                rows = [tuple(r) for r in c.execute(select, (before, batch)).fetchall()]
                if not rows:
                    break
                ids = [r[0] for r in rows]
                marks = ",".join("?" * len(ids))
                for table in _DEPENDENT:
                    c.execute(f"DELETE FROM {table} WHERE run_id IN ({marks})", ids)
                c.execute(f"DELETE FROM runs WHERE id IN ({marks})", ids)
                by_tenant: dict[str, list[tuple[Any, ...]]] = {}
                for r in rows:
                    by_tenant.setdefault(r[1], []).append(r)
                for tenant, got in sorted(by_tenant.items()):
                    h = digest(got)
                    self._audit(c, now, None, None, "store.pruned", actor, None, None,
                                {"runs": len(got), "before": before, "sha256": h,
                                 "first": got[0][0], "last": got[-1][0]}, chain={"tenant": tenant})
                    report.runs[tenant] = report.runs.get(tenant, 0) + len(got)
                    report.hashes.setdefault(tenant, []).append(h)
            if len(rows) < batch:
                break
        return report
