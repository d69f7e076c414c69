"""The PostgreSQL store's hot path (a mixin of :class:`PostgresStore`): submit, claim, carry and end in one
statement each, batched (:mod:`.hot`, :mod:`.hotsql`, :mod:`.hotitems`), falling back to the shared code.

Each method returns None when the change is not one the hot path writes, or when the database answered that
it needs the shared way (nothing was written then): the caller goes on with the shared code, which writes it
or refuses it exactly as it always has. A refusal the hot path can tell itself (a stale commit) is raised as
the shared code raises it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from sealflow.store.errors import StoreError
from sealflow.store.postgres import hotitems
from sealflow.store.postgres.hot import GoGeneral, HotFailed, HotQueue, is_statement_error
from sealflow.store.sql import rows

if TYPE_CHECKING:
    from sealflow.store.capabilities import SqlReads
    from sealflow.store.postgres.chainlink import PgChain
    from sealflow.store.records import Claimed, Commit, Committed, NewRun, RunRecord

_T = TypeVar("_T")
#: what sends a change the shared way after the hot path tried it (nothing of it was written)
_GENERAL = (GoGeneral, HotFailed)


class HotPathMixin:
    """Methods of :class:`~sealflow.store.postgres.store.PostgresStore` (see the module)."""

    _hot: HotQueue
    _chain: PgChain
    #: digests of the plans this process stored or saw stored (a hot submit then sends no plan body)
    _plans_known: set[str]

    if TYPE_CHECKING:  # the store's (store.py)
        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]: ...

    def _hot_init(self, pool: Callable[[], ConnectionPool]) -> None:
        self._hot = HotQueue(pool)
        self._plans_known = set()

    def _hot_send(self, item: hotitems.Item, resolve: Callable[[hotitems.Item], _T]) -> _T | None:
        """Send one item; None when it must go the shared way."""
        try:
            return self._hot.submit(item, resolve)
        except _GENERAL:
            return None
        except psycopg.Error as exc:
            if not is_statement_error(exc):
                raise
            return None  # another item's statement failed with it: the shared way, alone

    # -- commits ------------------------------------------------------------------------------------
    def _hot_commit(self, commit: Commit, now: float, shift: float = 0.0) -> Committed | None:
        """``commit`` written the hot way, or None (the shared way); ``shift``: from the caller's clock to the
        database's (the hot items add it to the due times the caller computed)."""
        kind = hotitems.commit_kind(commit)
        if kind is None:
            return None
        chain = self._chain.chain
        base, step, seen = commit.carry_from, commit.step, commit.seen
        assert step is not None and seen is not None  # (commit_kind: a commit of a step on the engine's view)
        if base is not None and base.id == commit.run_id:
            hotitems.remember(chain, base)
        events = chain.bodies(_Reads(self), hotitems.commit_events(commit, now))
        expected = (seen[0], commit.expected_rev, seen[3], step.token, seen[1], seen[2])
        if kind == "end":
            def ended(answer: hotitems.Item) -> Committed:
                if answer["s"] == "fence":
                    self._check_fence(hotitems.fence_found(answer), commit, expected)  # type: ignore[attr-defined]
                    raise StoreError(f"the commit of run {commit.run_id} was not written")  # (unreachable)
                return hotitems.end_result(answer)

            return self._hot_send(hotitems.end_item(commit, now, events), ended)
        token = rows.new_token()
        assert commit.next is not None  # (commit_kind: a carry has a next step)
        lease_expires = now + commit.next.lease_ms / 1000.0
        results = functools.partial(self.results, commit.run_id)  # type: ignore[attr-defined]

        def carried(answer: hotitems.Item) -> Committed:
            if answer["s"] == "fence":
                self._check_fence(hotitems.fence_found(answer), commit, expected)  # type: ignore[attr-defined]
                raise StoreError(f"the commit of run {commit.run_id} was not written")  # (unreachable)
            return hotitems.carry_result(commit, answer, now, token, lease_expires, results, shift)

        return self._hot_send(hotitems.carry_item(commit, now, token, lease_expires, events, shift), carried)

    # -- claims -------------------------------------------------------------------------------------
    def _hot_claim(self, run_id: str, step_id: str, attempt: int, token: int, tenant: str | None, owner: str,
                   now: float) -> Claimed | None:
        if not tenant:  # a message naming no tenant is refused (and audited) the shared way
            return None
        chain = self._chain.chain
        queued, running = hotitems.claim_events(run_id, step_id, owner, now)
        reads = _Reads(self)
        item = hotitems.claim_item(run_id, step_id, attempt, token, tenant, owner, now, chain.bodies(reads, queued),
                                   chain.bodies(reads, running))
        results = functools.partial(self.results, run_id)  # type: ignore[attr-defined]
        return self._hot_send(item, lambda answer: hotitems.claim_result(answer, results))

    # -- submits ------------------------------------------------------------------------------------
    def _hot_submit(self, new: NewRun, now: float) -> tuple[RunRecord, bool] | None:
        chain = self._chain.chain
        hotitems.remember(chain, new)
        if not chain.knows_tools(new.plan_digest):
            chain.remember_plan(new.plan_digest, new.plan_json)
        events = chain.bodies(_Reads(self), hotitems.submit_events(new, now))
        known = new.plan_digest in self._plans_known
        item = hotitems.submit_item(new, now, rows.new_token(), known, events)
        got = self._hot_send(item, lambda answer: (hotitems.submit_result(new, now), True))
        if got is not None and not known:
            if len(self._plans_known) >= 4096:
                self._plans_known.clear()
            self._plans_known.add(new.plan_digest)
        return got


class _Reads:
    """A store's pooled reads seen as a connection (``execute(sql, args)``, the shared SQL): what hashing an
    event's content reads when the run or plan it names is not cached (outside any transaction)."""

    __slots__ = ("_store",)

    def __init__(self, store: SqlReads) -> None:
        self._store = store

    def execute(self, sql: str, args: tuple[Any, ...] = ()) -> _Rows:
        return _Rows(self._store._read(sql, args))


class _Rows:
    __slots__ = ("_rows",)

    def __init__(self, got: list[tuple[Any, ...]]) -> None:
        self._rows = got

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None
