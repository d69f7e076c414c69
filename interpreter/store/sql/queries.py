"""Reading runs and plans for callers that browse: filtered, keyset-paginated run listings (the HTTP API's
``GET /v1/runs``, ``sealflow runs list``) and the plans a store holds by workflow name and version.

Keyset pagination, newest first: a page ends at the ``(created_at, id)`` of its last run and the next page
starts strictly after it, so a page never repeats or skips a run when new ones arrive meanwhile. Shared by
both backends (the PostgreSQL store runs this SQL through its dialect).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sealflow.store.records import RunQuery, RunRecord
from sealflow.store.sql import rows, tags
from sealflow.store.sql.conn import Row

#: the most runs one page may hold
MAX_PAGE = 500


class QueriesMixin:
    """Expects ``_read`` from the store."""

    if TYPE_CHECKING:  # the store's (sealflow.store.sql.store)
        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]: ...

    def query_runs(self, query: RunQuery) -> list[RunRecord]:
        where, args = self._filters(query, states=True)
        if query.after is not None:
            where.append("(created_at < ? OR (created_at = ? AND id < ?))")
            args.extend((query.after[0], query.after[0], query.after[1]))
        limit = max(1, min(int(query.limit), MAX_PAGE))
        got = self._read(f"SELECT {rows.RUN_COLS} FROM runs WHERE {' AND '.join(where)} "
                         "ORDER BY created_at DESC, id DESC LIMIT ?", (*args, limit))
        return [rows.run(r) for r in got]

    def count_runs(self, query: RunQuery) -> dict[str, int]:
        """State -> how many runs of ``query.tenant`` match its filters but the states and the page (the
        counts beside a filtered list: every state's, whichever are shown)."""
        where, args = self._filters(query, states=False)
        if len(args) > 1:
            got = self._read(f"SELECT state, COUNT(*) FROM runs WHERE {' AND '.join(where)} GROUP BY state",
                             tuple(args))
            return {str(r[0]): int(r[1]) for r in got}
        # the tenant's counts, unfiltered: its runs by the (tenant, state) index, less its fan-out children by the
        # children's index (a tenant of 100,000 runs is counted without reading its rows)
        counts = {str(r[0]): int(r[1]) for r in self._read(
            "SELECT state, COUNT(*) FROM runs WHERE tenant = ? GROUP BY state", (query.tenant,))}
        # (``|| ''``: neither the tenant's index nor the state's, which would read every run, but the children's)
        for state, children in self._read("SELECT state || '', COUNT(*) FROM runs WHERE parent_run_id > '' AND "
                                          "tenant || '' = ? GROUP BY state || ''", (query.tenant,)):
            counts[str(state)] -= int(children)
        return {state: n for state, n in counts.items() if n > 0}

    @staticmethod
    def _filters(query: RunQuery, *, states: bool) -> tuple[list[str], list[object]]:
        where = ["tenant = ? AND parent_run_id IS NULL"]  # fan-out children: in status
        args: list[object] = [query.tenant]
        if query.workflow is not None:
            where.append("workflow = ?")
            args.append(query.workflow)
        if query.version is not None:
            where.append("workflow_version = ?")
            args.append(query.version)
        if states and query.states:
            where.append(f"state IN ({','.join('?' * len(query.states))})")
            args.extend(query.states)
        if query.initiator is not None:
            where.append("initiator = ?")
            args.append(query.initiator)
        if query.created_after is not None:
            where.append("created_at >= ?")
            args.append(query.created_after)
        if query.created_before is not None:
            where.append("created_at < ?")
            args.append(query.created_before)
        more, more_args = tags.filters(query.tags)
        return where + more, args + more_args

    def stored_plans(self) -> list[tuple[str, int, str, float]]:
        """``(workflow, version, digest, stored_at)`` of every plan stored, by name, version, then time."""
        got = self._read("SELECT workflow, version, digest, created_at FROM plans WHERE workflow NOT LIKE ? "
                         "ORDER BY workflow, version, created_at", ("%#%",))  # name#step: a fan-out's sub-flow
        return [(r[0], int(r[1]), r[2], float(r[3])) for r in got]

    def plan_digests(self, workflow: str, version: int | None = None) -> list[tuple[str, int, float]]:
        """``(digest, version, stored_at)`` of the plans stored for ``workflow`` (one ``version``, else
        every one), newest first."""
        if version is None:
            got = self._read("SELECT digest, version, created_at FROM plans WHERE workflow = ? "
                             "ORDER BY created_at DESC", (workflow,))
        else:
            got = self._read("SELECT digest, version, created_at FROM plans WHERE workflow = ? AND version = ? "
                             "ORDER BY created_at DESC", (workflow, version))
        return [(r[0], int(r[1]), float(r[2])) for r in got]
