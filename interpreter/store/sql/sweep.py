"""The SQLite store's dispatch and sweeping operations (a mixin of :class:`SqliteStore`).

The sweeper keeps invariant 2 of :mod:`sealflow.store.base` moving:
expired leases become ``scheduled`` again with a new token (so the zombie's
commit fails its fence), ``leases_lost`` counted and what was observed kept as
the attempt's message (the claiming worker runs it again, or finds it poison:
engine.poison); due
timers become outbox rows (``backoff``:
``retry_wait -> scheduled``; ``wait`` / ``approval_timeout``: a wake-up
message for the ``waiting`` attempt) or time the run out (``run_deadline``);
outbox rows sent long ago and never claimed are sent again (a lost message is
found again; a duplicate is refused by the claim).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sealflow.core import states
from sealflow.core.fingerprints import fingerprint
from sealflow.store.records import DeadLetterSpec, Due, Message, SweepReport
from sealflow.store.sql import rows
from sealflow.store.sql.conn import Conn, Row
from sealflow.store.sql.statements import OUTBOX_PUT

_ACTIVE, _CURSOR = rows.ACTIVE, rows.CURSOR
_LIVE = "('queued','running','waiting','cancelling','compensating')"


class SweepMixin:
    #: how the sweep locks the rows it takes (the PostgreSQL store: ``FOR UPDATE ... SKIP LOCKED``, so two
    #: sweepers never take the same due row; SQLite has one writer at a time and needs none)
    _LOCK_EXPIRED = ""
    _LOCK_TIMERS = ""

    #: is an outbox row due (a read, before a write transaction is begun for nothing)
    _OUTBOX_DUE = "SELECT 1 FROM outbox WHERE sent_at IS NULL AND due_at <= ? LIMIT 1"

    if TYPE_CHECKING:  # the store's (sealflow.store.sql.store) and its step path's (sealflow.store.sql.steps)
        def _tx(self) -> AbstractContextManager[Conn]: ...
        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]: ...
        def _audit(self, c: Conn, now: float, run_id: str | None, step_id: str | None, event: str,
                   actor: str = "system", before: str | None = None, after: str | None = None,
                   detail: Mapping[str, Any] | None = None, chain: Mapping[str, Any] | None = None) -> None: ...
        def _step_to(self, c: Conn, now: float, run_id: str, step_id: str, before: str, after: str,
                     actor: str = "system", detail: Mapping[str, Any] | None = None,
                     chain: Mapping[str, Any] | None = None, *, slots: bool = True) -> None: ...
        def _run_to(self, c: Conn, now: float, run_id: str, before: str, after: str, actor: str = "system",
                    detail: Mapping[str, Any] | None = None, out: list[Message] | None = None) -> None: ...
        def _dead_letter(self, c: Conn, now: float, run_id: str, run_state: str, spec: DeadLetterSpec, actor: str,
                         out: list[Message] | None = None) -> str: ...

    def take_due(self, now: float, limit: int = 256) -> list[Due]:
        if not self._read(self._OUTBOX_DUE, (now,)):  # nothing due: no write transaction (nor the write lock)
            return []
        with self._tx() as c:
            got = c.execute("SELECT o.run_id, o.step_id, o.attempt, o.token, r.tenant, r.priority FROM outbox o "
                            "JOIN runs r ON r.id = o.run_id WHERE o.sent_at IS NULL AND o.due_at <= ? "
                            "ORDER BY " + rows.PRIORITY_RANK + ", o.due_at LIMIT ?", (now, limit)).fetchall()
            if got:
                c.executemany("UPDATE outbox SET sent_at = ? WHERE run_id = ? AND step_id = ? AND attempt = ? AND "
                              "token = ?", [(now, *r[:4]) for r in got])
        return [Due(Message(*r[:5]), r[5]) for r in got]

    def take_outbox(self, now: float, limit: int = 256) -> list[Message]:
        """:meth:`take_due`'s messages, without their priorities."""
        return [due.message for due in self.take_due(now, limit)]

    def reset_dispatch(self) -> int:
        with self._tx() as c:
            return c.execute("UPDATE outbox SET sent_at = NULL WHERE sent_at IS NOT NULL").rowcount

    def expire_leases(self, owner: str, now: float, why: str | None = None) -> int:
        """End now every lease ``owner`` holds (a worker known dead): each attempt goes back to ``scheduled``
        as the sweep would put it, with ``why`` (what was observed) as the attempt's message; how many."""
        with self._tx() as c:
            held = c.execute(f"SELECT a.run_id, a.step_id, a.attempt, a.token, a.lease_owner, r.state "
                             f"FROM runs r JOIN attempts a ON {_CURSOR} WHERE r.state IN {_LIVE} AND "
                             "a.state = 'running' AND a.lease_owner = ?" + self._LOCK_EXPIRED, (owner,)).fetchall()
            for run_id, step_id, attempt, token, holder, run_state in held:
                self._expire(c, now, run_id, step_id, attempt, token, holder, run_state, why)
            return len(held)

    def lease_owners(self) -> list[str]:
        return [r[0] for r in self._read(f"SELECT DISTINCT a.lease_owner FROM runs r JOIN attempts a ON {_CURSOR} "
                                         f"WHERE r.state IN {_LIVE} AND a.state = 'running' AND "
                                         "a.lease_owner IS NOT NULL")]

    def active_runs(self) -> list[str]:
        return [r[0] for r in self._read(f"SELECT id FROM runs WHERE state IN {_LIVE} ORDER BY created_at")]

    def stalled_runs(self) -> list[str]:
        got = self._read(f"SELECT r.id FROM runs r LEFT JOIN attempts a ON {_CURSOR} WHERE r.state IN {_LIVE} "
                         f"AND (a.state IS NULL OR a.state NOT IN {_ACTIVE})")
        return [r[0] for r in got]

    def next_due(self, run_id: str, *, redeliver_after: float = 60.0) -> float | None:
        got = self._read(
            "SELECT MIN(x) FROM ("
            " SELECT MIN(fire_at) AS x FROM timers WHERE run_id = ?1"
            " UNION ALL SELECT MIN(due_at) FROM outbox WHERE run_id = ?1 AND sent_at IS NULL"
            " UNION ALL SELECT MIN(sent_at) + ?2 FROM outbox WHERE run_id = ?1 AND sent_at IS NOT NULL"
            f" UNION ALL SELECT a.lease_expires FROM runs r JOIN attempts a ON {_CURSOR} WHERE r.id = ?1 "
            "AND a.state = 'running')",
            (run_id, redeliver_after))
        due: float | None = got[0][0]
        return due

    def sweep_due(self, now: float, *, redeliver_after: float = 60.0) -> bool:
        """Whether :meth:`sweep` would find anything now: an expired lease, a due timer, or an outbox row sent
        long ago and never claimed. A read: most sweeps find nothing, and need no write transaction (on
        PostgreSQL, no turn under the writers' lock). Something that becomes due just after is the next
        sweep's."""
        got = self._read(
            f"SELECT EXISTS (SELECT 1 FROM runs r JOIN attempts a ON {_CURSOR} WHERE r.state IN {_LIVE} AND "
            "a.state = 'running' AND a.lease_expires <= ?) OR EXISTS (SELECT 1 FROM timers WHERE fire_at <= ?) "
            "OR EXISTS (SELECT 1 FROM outbox WHERE sent_at IS NOT NULL AND sent_at <= ?)",
            (now, now, now - redeliver_after))
        return bool(got[0][0])

    def sweep(self, now: float, *, redeliver_after: float = 60.0, limit: int = 500) -> SweepReport:
        report = SweepReport()
        if not self.sweep_due(now, redeliver_after=redeliver_after):
            return report
        with self._tx() as c:
            expired = c.execute(f"SELECT a.run_id, a.step_id, a.attempt, a.token, a.lease_owner, r.state "
                                f"FROM runs r JOIN attempts a ON {_CURSOR} WHERE r.state IN {_LIVE} AND "
                                "a.state = 'running' AND a.lease_expires <= ? LIMIT ?" + self._LOCK_EXPIRED,
                                (now, limit)).fetchall()
            for run_id, step_id, attempt, token, owner, run_state in expired:
                self._expire(c, now, run_id, step_id, attempt, token, owner, run_state)
                report.leases_expired += 1
                report.runs_touched.add(run_id)
            timers = c.execute("SELECT id, run_id, step_id, attempt, token, kind FROM timers WHERE fire_at <= ? "
                               "ORDER BY fire_at LIMIT ?" + self._LOCK_TIMERS, (now, limit)).fetchall()
            for timer_id, run_id, step_id, attempt, token, kind in timers:
                c.execute("DELETE FROM timers WHERE id = ?", (timer_id,))
                report.runs_touched.add(run_id)
                if kind == "run_deadline":
                    report.runs_timed_out += self._time_out(c, now, run_id)
                else:
                    report.timers_fired += self._fire(c, now, run_id, step_id, attempt, token, kind)
            report.redelivered = c.execute(
                "UPDATE outbox SET sent_at = NULL WHERE sent_at IS NOT NULL AND sent_at <= ?",
                (now - redeliver_after,)).rowcount
        return report

    def _expire(self, c: Conn, now: float, run_id: str, step_id: str, attempt: int, token: int, owner: str | None,
                run_state: str, why: str | None = None) -> None:
        # what was observed, no more: a lease that ran out is not a process known dead (it may have stalled, or
        # failed to reach the store to commit); recovery, which can tell, says so (``why``)
        observed = f"worker {owner}: {why}" if why else (
            f"the lease of worker {owner} ran out before it committed a result (it died, stalled, or could not "
            "reach the store)")
        detail = {"owner": owner, "attempt": attempt, "observed": observed}
        self._audit(c, now, run_id, step_id, "lease_expired", "sweeper", None, None, detail)
        # claimable: a cancelling run's attempt goes back to a worker, which does not start it but
        # cancels the run (and starts its compensation); a compensating run's compensation runs again
        if run_state in states.RUN_CLAIMABLE:
            self._step_to(c, now, run_id, step_id, "running", "scheduled", "sweeper")
            # counted: the worker that claims it runs it again while it is under lost_attempts (engine.poison)
            c.execute("UPDATE attempts SET state = 'scheduled', token = ?, lease_owner = NULL, lease_expires = NULL, "
                      "leases_lost = leases_lost + 1, error_message = ? WHERE run_id = ? AND step_id = ? AND "
                      "attempt = ?", (token + 1, observed, run_id, step_id, attempt))
            c.execute("DELETE FROM outbox WHERE run_id = ? AND step_id = ? AND attempt = ?", (run_id, step_id, attempt))
            c.execute("INSERT INTO outbox (run_id, step_id, attempt, token, due_at) VALUES (?,?,?,?,?)",
                      (run_id, step_id, attempt, token + 1, now))
            return
        self._step_to(c, now, run_id, step_id, "running", "cancelled", "sweeper")
        c.execute("UPDATE attempts SET state = 'cancelled', token = ?, ended_at = ?, lease_owner = NULL, "
                  "lease_expires = NULL WHERE run_id = ? AND step_id = ? AND attempt = ?",
                  (token + 1, now, run_id, step_id, attempt))
        if run_state == "cancelling":
            self._run_to(c, now, run_id, "cancelling", "cancelled", "sweeper")
            c.execute("UPDATE runs SET state = 'cancelled', rev = rev + 1, updated_at = ? WHERE id = ?", (now, run_id))

    def _fire(self, c: Conn, now: float, run_id: str, step_id: str, attempt: int, token: int, kind: str) -> int:
        row = c.execute("SELECT state, token FROM attempts WHERE run_id = ? AND step_id = ? AND attempt = ?",
                        (run_id, step_id, attempt)).fetchone()
        if row is None or row[1] != token:
            return 0
        if kind == "backoff":
            if row[0] != "retry_wait":
                return 0
            self._step_to(c, now, run_id, step_id, "retry_wait", "scheduled", "sweeper", {"timer": kind})
            c.execute("UPDATE attempts SET state = 'scheduled', token = ? WHERE run_id = ? AND step_id = ? AND "
                      "attempt = ?", (token + 1, run_id, step_id, attempt))
            token += 1
        elif row[0] != "waiting":
            return 0
        else:
            self._audit(c, now, run_id, step_id, "timer_fired", "sweeper", None, None,
                        {"kind": kind, "attempt": attempt})
        c.execute(OUTBOX_PUT, (run_id, step_id, attempt, token, now, None))
        return 1

    def _time_out(self, c: Conn, now: float, run_id: str) -> int:
        run_state = c.execute("SELECT state FROM runs WHERE id = ?", (run_id,)).fetchone()
        if run_state is None or run_state[0] not in ("queued", "running", "waiting", "cancelling"):
            return 0
        run_state = run_state[0]
        active = c.execute(f"SELECT a.step_id, a.attempt, a.state, a.token FROM runs r JOIN attempts a ON {_CURSOR} "
                           f"WHERE r.id = ? AND a.state IN {_ACTIVE}", (run_id,)).fetchall()
        step_id = None
        for step_id, attempt, state, token in active:
            after = "timed_out" if state in ("running", "waiting") else "cancelled"
            self._step_to(c, now, run_id, step_id, state, after, "sweeper")
            c.execute("UPDATE attempts SET state = ?, token = ?, ended_at = ?, error_class = 'timeout', "
                      "error_message = 'the run deadline passed', lease_owner = NULL, lease_expires = NULL "
                      "WHERE run_id = ? AND step_id = ? AND attempt = ?",
                      (after, token + 1, now, run_id, step_id, attempt))
        message = "the run exceeded budget.max_runtime"
        self._run_to(c, now, run_id, run_state, "timed_out", "sweeper", {"error_class": "timeout",
                                                                        "message": message})
        final = self._dead_letter(c, now, run_id, "timed_out",
                                  DeadLetterSpec(step_id, message, "timeout", fingerprint(None, "timeout", message)),
                                  "sweeper")
        c.execute("UPDATE runs SET state = ?, rev = rev + 1, updated_at = ?, error_class = 'timeout', "
                  "error_message = ? WHERE id = ?", (final, now, message, run_id))
        c.execute("DELETE FROM timers WHERE run_id = ?", (run_id,))
        c.execute("DELETE FROM outbox WHERE run_id = ?", (run_id,))
        return 1
