"""The SQLite store: the embedded default (``sqlite:///.sealflow/state.db``).

WAL journal, ``synchronous=NORMAL`` (a commit survives a process crash; an OS
crash may lose the last commits, never corrupt the file), ``busy_timeout`` for
other processes on the same file. WAL checkpoints (which fsync) run on a
background thread with its own connection instead of inside a step's commit. One connection per store object guarded by
a lock (threads of one process queue on the lock instead of spinning in
SQLite's busy handler); every write is one ``BEGIN IMMEDIATE`` transaction, so
each operation of :class:`~interpreter.store.base.Store` is atomic. Statements
are fixed strings so the sqlite3 statement cache keeps them prepared.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import threading
from typing import Iterator

from .. import states
from .base import (
    AttemptRecord, AuditEvent, AuditRecord, Claimed, Commit, Committed, DeadLetterRecord, DeadLetterSpec, LedgerRecord, Message,
    NewRun, NextAttempt, OutboxRecord, RunRecord, Store, SweepReport, TimerRecord,
)
from . import sqlite_rows as rows
from .errors import (
    ConcurrencyError, FencingError, IdempotencyConflict, IllegalTransition, InvalidOperation, MessageRefused, NotFound,
)
from .sqlite_schema import migrate
from .sqlite_sweep import SweepMixin

dumps = rows.dumps
_ACTIVE = "('pending','scheduled','running','retry_wait','waiting')"
#: join condition: the run's cursor attempt (its single active attempt, invariant 1)
_CURSOR = "a.run_id = r.id AND a.step_id = r.cursor_step AND a.attempt = r.cursor_attempt"
_A_COLS = ", ".join("a." + c.strip() for c in rows.ATTEMPT_COLS.split(","))
_R_COLS = ", ".join("r." + c.strip() for c in rows.RUN_COLS.split(","))
_N_ATTEMPT = len(rows.ATTEMPT_COLS.split(","))


def new_token() -> int:
    """A fresh attempt token: random, so a forged message cannot guess it; claims then count up."""
    return random.getrandbits(40) + 1


class _Checkpointer(threading.Thread):
    """Checkpoints the WAL every ``interval`` seconds (PASSIVE: never blocks writers)."""

    def __init__(self, path: str, interval: float, busy_timeout_ms: int):
        super().__init__(name="sealflow-checkpoint", daemon=True)
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                     timeout=busy_timeout_ms / 1000)
        self._interval = interval
        self._stopped = threading.Event()
        self.start()

    def run(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.Error:  # busy or closing: the next round will do it
                pass

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=5)
        try:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass
        self._conn.close()


class SqliteStore(SweepMixin, Store):
    """:class:`Store` on one SQLite file."""

    def __init__(self, path: str = ".sealflow/state.db", *, busy_timeout_ms: int = 10_000,
                 checkpoint_interval: float = 0.25):
        self.path = path
        self.url = f"sqlite:///{path}"
        if path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, cached_statements=512,
                                     timeout=busy_timeout_ms / 1000)
        c = self._conn
        c.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        if path != ":memory:":
            c.execute("PRAGMA journal_mode = WAL")
        c.execute("PRAGMA synchronous = NORMAL")
        c.execute("PRAGMA temp_store = MEMORY")
        self._version = migrate(c, path=path)
        self._checkpointer: _Checkpointer | None = None
        if path != ":memory:" and checkpoint_interval:
            c.execute("PRAGMA wal_autocheckpoint = 0")
            self._checkpointer = _Checkpointer(path, checkpoint_interval, busy_timeout_ms)

    # -- lifecycle ---------------------------------------------------------------------------------
    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None  # type: ignore[assignment]

    def schema_version(self) -> int:
        return self._version

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            c = self._conn
            if c is None:
                raise InvalidOperation("the store is closed; open it again with open_store(url)")
            c.execute("BEGIN IMMEDIATE")
            try:
                yield c
            except IllegalTransition as exc:
                c.execute("ROLLBACK")
                self._audit_illegal(c, exc)
                raise
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")

    def _read(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            if self._conn is None:
                raise InvalidOperation("the store is closed; open it again with open_store(url)")
            return self._conn.execute(sql, args).fetchall()

    # -- audit helpers -----------------------------------------------------------------------------
    @staticmethod
    def _audit(c, now: float, run_id, step_id, event, actor="system", before=None, after=None, detail=None) -> None:
        c.execute("INSERT INTO audit (run_id, step_id, event, actor, state_before, state_after, detail, ts) "
                  "VALUES (?,?,?,?,?,?,?,?)",
                  (run_id, step_id, event, actor, before, after, None if detail is None else dumps(detail), now))

    def _audit_illegal(self, c, exc: IllegalTransition) -> None:
        info = getattr(exc, "info", {})
        c.execute("BEGIN IMMEDIATE")
        self._audit(c, info.get("now", 0.0), info.get("run_id"), info.get("step_id"), "illegal_transition",
                    info.get("actor", "system"), info.get("before"), info.get("after"),
                    {"kind": info.get("kind"), "message": str(exc)})
        c.execute("COMMIT")

    @staticmethod
    def _illegal(kind: str, run_id, step_id, before, after, now, actor="system") -> IllegalTransition:
        what = f"run {run_id}" if kind == "run" else f"step {step_id!r} of run {run_id}"
        exc = IllegalTransition(f"{what} cannot go from {before!r} to {after!r}; see interpreter/states.py for the "
                                f"legal transitions")
        exc.info = {"kind": kind, "run_id": run_id, "step_id": step_id, "before": before, "after": after,
                    "now": now, "actor": actor}
        return exc

    def _step_to(self, c, now, run_id, step_id, before, after, actor="system", detail=None) -> None:
        if not states.step_can(before, after):
            raise self._illegal("step", run_id, step_id, before, after, now, actor)
        if before != after:
            self._audit(c, now, run_id, step_id, "step." + after, actor, before, after, detail)

    def _run_to(self, c, now, run_id, before, after, actor="system", detail=None) -> None:
        if not states.run_can(before, after):
            raise self._illegal("run", run_id, None, before, after, now, actor)
        if before != after:
            self._audit(c, now, run_id, None, "run." + after, actor, before, after, detail)

    def append_audit(self, event: AuditEvent, now: float) -> None:
        with self._tx() as c:
            self._audit(c, now, event.run_id, event.step_id, event.event, event.actor, event.state_before,
                        event.state_after, event.detail)

    # -- plans and runs ----------------------------------------------------------------------------
    def put_plan(self, digest: str, workflow: str, version: int, body_json: str, now: float) -> None:
        with self._tx() as c:
            c.execute("INSERT OR IGNORE INTO plans (digest, workflow, version, body, created_at) VALUES (?,?,?,?,?)",
                      (digest, workflow, version, body_json, now))

    def get_plan(self, digest: str) -> str:
        got = self._read("SELECT body FROM plans WHERE digest = ?", (digest,))
        if not got:
            raise NotFound(f"no plan with digest {digest} in {self.url}; was the run submitted to another store?")
        return got[0][0]

    def _get_run(self, c, run_id: str) -> RunRecord:
        row = c.execute(f"SELECT {rows.RUN_COLS} FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise NotFound(f"no run {run_id!r} in {self.url}; list runs with `sealflow status`")
        return rows.run(row)

    def get_run(self, run_id: str) -> RunRecord:
        with self._lock:
            return self._get_run(self._conn, run_id)

    def list_runs(self, *, states: tuple[str, ...] | None = None, limit: int = 100) -> list[RunRecord]:
        if states:
            marks = ",".join("?" * len(states))
            got = self._read(f"SELECT {rows.RUN_COLS} FROM runs WHERE state IN ({marks}) ORDER BY created_at LIMIT ?",
                             (*states, limit))
        else:
            got = self._read(f"SELECT {rows.RUN_COLS} FROM runs ORDER BY created_at LIMIT ?", (limit,))
        return [rows.run(r) for r in got]

    def attempts(self, run_id: str) -> list[AttemptRecord]:
        got = self._read(f"SELECT {rows.ATTEMPT_COLS} FROM attempts WHERE run_id = ? "
                         "ORDER BY COALESCE(scheduled_at, 0), step_id, attempt", (run_id,))
        return [rows.attempt(r) for r in got]

    def active_attempt(self, run_id: str) -> AttemptRecord | None:
        got = self._read(f"SELECT {_A_COLS} FROM runs r JOIN attempts a ON {_CURSOR} WHERE r.id = ? "
                         f"AND a.state IN {_ACTIVE}", (run_id,))
        return rows.attempt(got[0]) if got else None

    def results(self, run_id: str) -> dict[str, tuple[str, str | None]]:
        return {r[0]: (r[1], r[2]) for r in self._read("SELECT step_id, status, output FROM results WHERE run_id = ?",
                                                       (run_id,))}

    def submit(self, new: NewRun, now: float) -> tuple[RunRecord, bool]:
        with self._tx() as c:
            if new.idempotency_key is not None:
                got = c.execute("SELECT id, input_hash FROM runs WHERE tenant = ? AND workflow = ? AND "
                                "idempotency_key = ?", (new.tenant, new.workflow, new.idempotency_key)).fetchone()
                if got is not None:
                    if got[1] != new.input_hash:
                        raise IdempotencyConflict(
                            f"idempotency key {new.idempotency_key!r} was used by run {got[0]} with a different "
                            f"input; send the same input to get that run back, or use a new key")
                    return self._get_run(c, got[0]), False
            c.execute("INSERT OR IGNORE INTO plans (digest, workflow, version, body, created_at) VALUES (?,?,?,?,?)",
                      (new.plan_digest, new.workflow, new.workflow_version, new.plan_json, now))
            c.execute("INSERT INTO runs (id, tenant, workflow, workflow_version, plan_digest, input, state, rev, "
                      "initiator, idempotency_key, input_hash, created_at, updated_at, deadline, cursor_step, "
                      "cursor_attempt, priority) VALUES (?,?,?,?,?,?,'queued',1,?,?,?,?,?,?,?,1,?)",
                      (new.id, new.tenant, new.workflow, new.workflow_version, new.plan_digest, new.input_json,
                       new.initiator, new.idempotency_key, new.input_hash, now, now, new.deadline, new.first_step,
                       new.priority))
            self._audit(c, now, new.id, None, "run.created", new.initiator, None, "created",
                        {"workflow": new.workflow, "version": new.workflow_version, "plan": new.plan_digest,
                         "tenant": new.tenant, "idempotency_key": new.idempotency_key})
            self._run_to(c, now, new.id, "created", "queued", new.initiator)
            if new.deadline is not None:
                c.execute("INSERT INTO timers (run_id, kind, fire_at) VALUES (?, 'run_deadline', ?)",
                          (new.id, new.deadline))
            self._insert_attempt(c, now, new.id, NextAttempt(new.first_step, 1, "scheduled", now, new.first_lease_ms),
                                 False)
            return self._get_run(c, new.id), True

    def _insert_attempt(self, c, now: float, run_id: str, nxt: NextAttempt, inline: bool,
                        actor: str = "system") -> tuple[int, Message | None]:
        """Insert the run's next attempt (with its outbox row or timer); the caller moves the cursor."""
        number = c.execute("SELECT COALESCE(MAX(attempt), 0) + 1 FROM attempts WHERE run_id = ? AND step_id = ?",
                           (run_id, nxt.step_id)).fetchone()[0]
        token = new_token()
        self._step_to(c, now, run_id, nxt.step_id, "pending", nxt.state, actor,
                      None if nxt.try_no == 1 else {"attempt": number, "try": nxt.try_no, "due_at": nxt.due_at})
        c.execute("INSERT INTO attempts (run_id, step_id, attempt, try_no, state, token, lease_ms, scheduled_at, "
                  "due_at, data) VALUES (?,?,?,?,?,?,?,?,?,?)",
                  (run_id, nxt.step_id, number, nxt.try_no, nxt.state, token, nxt.lease_ms, now, nxt.due_at,
                   None if nxt.data is None else dumps(nxt.data)))
        if nxt.state == "scheduled":
            c.execute("INSERT INTO outbox (run_id, step_id, attempt, token, due_at, sent_at) VALUES (?,?,?,?,?,?)",
                      (run_id, nxt.step_id, number, token, nxt.due_at, now if inline else None))
            return number, (Message(run_id, nxt.step_id, number, token) if inline else None)
        if nxt.timer_kind is not None:
            c.execute("INSERT INTO timers (run_id, step_id, attempt, token, kind, fire_at) VALUES (?,?,?,?,?,?)",
                      (run_id, nxt.step_id, number, token, nxt.timer_kind, nxt.due_at))
        return number, None

    # -- the step path -----------------------------------------------------------------------------
    def claim(self, run_id: str, step_id: str, attempt: int, token: int, *, owner: str, now: float) -> Claimed:
        refused: tuple[str, str] | None = None
        with self._tx() as c:
            row = c.execute(f"SELECT {_A_COLS}, {_R_COLS} FROM attempts a JOIN runs r ON r.id = a.run_id "
                            "WHERE a.run_id = ? AND a.step_id = ? AND a.attempt = ?",
                            (run_id, step_id, attempt)).fetchone()
            if row is None:
                refused = ("unknown_attempt", "no such attempt")
            else:
                att, run = rows.attempt(row[:_N_ATTEMPT]), rows.run(row[_N_ATTEMPT:])
                before = att.state
                if att.token != token:
                    refused = ("stale_token", f"token {token} is not the attempt's current token")
                elif not (before == "scheduled" or (before == "waiting" and att.due_at is not None
                                                    and att.due_at <= now)):
                    refused = ("not_claimable", f"attempt is {before}")
                elif run.state not in states.RUN_ACTIVE:
                    refused = ("run_not_active", f"run is {run.state}")
            if refused is not None:
                self._audit(c, now, run_id, step_id, "message_refused", owner, None, None,
                            {"reason": refused[0], "detail": refused[1], "attempt": attempt})
            else:
                att.state, att.token, att.lease_owner = "running", token + 1, owner
                att.lease_expires = now + att.lease_ms / 1000.0
                att.started_at = att.started_at or now
                c.execute("UPDATE attempts SET state = 'running', token = ?, lease_owner = ?, lease_expires = ?, "
                          "started_at = ? WHERE run_id = ? AND step_id = ? AND attempt = ?",
                          (att.token, owner, att.lease_expires, att.started_at, run_id, step_id, attempt))
                c.execute("DELETE FROM outbox WHERE run_id = ? AND step_id = ? AND attempt = ?",
                          (run_id, step_id, attempt))
                self._step_to(c, now, run_id, step_id, before, "running", owner)
                if run.state != "running":
                    self._run_to(c, now, run_id, run.state, "running", owner)
                    c.execute("UPDATE runs SET state = 'running', rev = rev + 1, updated_at = ? WHERE id = ?",
                              (now, run_id))
                    run.state, run.rev = "running", run.rev + 1
                results = {r[0]: (r[1], r[2]) for r in
                           c.execute("SELECT step_id, status, output FROM results WHERE run_id = ?", (run_id,))}
        if refused is not None:
            raise MessageRefused(f"message for step {step_id!r} of run {run_id} refused: {refused[1]}", refused[0])
        return Claimed(run, att, results, before == "waiting")

    def commit(self, commit: Commit, now: float) -> Committed:
        with self._tx() as c:
            run_id = commit.run_id
            step = commit.step
            got = c.execute("SELECT r.state, r.rev, a.state, a.token FROM runs r LEFT JOIN attempts a ON "
                            "a.run_id = r.id AND a.step_id = ? AND a.attempt = ? WHERE r.id = ?",
                            (step and step.step_id, step and step.attempt, run_id)).fetchone()
            if got is None:
                raise NotFound(f"no run {run_id!r}")
            run_state, rev = got[0], got[1]
            cur = got[2:]
            if step is not None:
                if cur[0] is None or cur[1] != step.token:
                    raise FencingError(f"step {step.step_id!r} attempt {step.attempt} of run {run_id}: token "
                                       f"{step.token} is no longer current (lease expired or the attempt moved on); "
                                       "nothing was changed")
            if rev != commit.expected_rev:
                raise ConcurrencyError(f"run {run_id} is at revision {rev}, not {commit.expected_rev}; "
                                       "re-read it and decide again")
            actor = commit.actor
            if step is not None:
                self._apply_step(c, now, run_id, cur[0], step, actor)
            if commit.ledger is not None:
                led = commit.ledger
                c.execute("INSERT OR IGNORE INTO ledger (tenant, key, run_id, step_id, result, created_at) "
                          "VALUES (?,?,?,?,?,?)", (led.tenant, led.key, led.run_id, led.step_id, led.result_json, now))
            messages: tuple[Message, ...] = ()
            cursor: tuple[str | None, int | None] = (None, None)
            if commit.next is not None:
                number, msg = self._insert_attempt(c, now, run_id, commit.next, commit.dispatch_inline, actor)
                cursor = (commit.next.step_id, number)
                if msg is not None:
                    messages = (msg,)
            ch = commit.run
            new_state = ch.state or run_state
            final_state = new_state
            if new_state != run_state:
                self._run_to(c, now, run_id, run_state, new_state, actor,
                             {"error_class": ch.error_class, "message": ch.error_message} if ch.error_class else None)
                if commit.dead_letter is not None:
                    final_state = self._dead_letter(c, now, run_id, new_state, commit.dead_letter, actor)
                if final_state in states.RUN_FINAL:
                    c.execute("DELETE FROM timers WHERE run_id = ?", (run_id,))
                    c.execute("DELETE FROM outbox WHERE run_id = ?", (run_id,))
            c.execute("UPDATE runs SET state = ?, rev = rev + 1, updated_at = ?, output = COALESCE(?, output), "
                      "error_class = COALESCE(?, error_class), error_message = COALESCE(?, error_message), "
                      "steps_executed = steps_executed + ?, tokens = tokens + ?, cost_usd = cost_usd + ?, "
                      "tool_calls = tool_calls + ?, cursor_step = COALESCE(?, cursor_step), "
                      "cursor_attempt = COALESCE(?, cursor_attempt) WHERE id = ?",
                      (final_state, now, ch.output_json, ch.error_class, ch.error_message, ch.add_steps,
                       ch.add_tokens, ch.add_cost_usd, ch.add_tool_calls, cursor[0], cursor[1], run_id))
            for ev in commit.audit:
                self._audit(c, now, run_id, ev.step_id, ev.event, ev.actor, ev.state_before, ev.state_after, ev.detail)
            return Committed(rev + 1, final_state, messages)

    def _apply_step(self, c, now: float, run_id: str, before: str, step, actor: str) -> None:
        after = step.state
        self._step_to(c, now, run_id, step.step_id, before, after, actor,
                      {"error_class": step.error_class, "message": step.error_message} if step.error_class else None)
        final = after in states.STEP_FINAL
        c.execute("UPDATE attempts SET state = ?, output = COALESCE(?, output), error_class = ?, error_message = ?, "
                  "due_at = COALESCE(?, due_at), data = COALESCE(?, data), ended_at = ?, "
                  "lease_owner = CASE WHEN ? THEN NULL ELSE lease_owner END, "
                  "lease_expires = CASE WHEN ? THEN NULL ELSE lease_expires END "
                  "WHERE run_id = ? AND step_id = ? AND attempt = ?",
                  (after, step.output_json, step.error_class, step.error_message, step.due_at,
                   None if step.data is None else dumps(step.data), now if final else None,
                   after != "running", after != "running", run_id, step.step_id, step.attempt))
        if before in ("waiting", "retry_wait") and after != before:
            c.execute("DELETE FROM timers WHERE run_id = ? AND step_id = ? AND attempt = ?",
                      (run_id, step.step_id, step.attempt))
        if step.timer_kind is not None and step.due_at is not None:
            c.execute("INSERT INTO timers (run_id, step_id, attempt, token, kind, fire_at) VALUES (?,?,?,?,?,?)",
                      (run_id, step.step_id, step.attempt, step.token, step.timer_kind, step.due_at))
        if final and "@" not in step.step_id:
            c.execute("INSERT INTO results (run_id, step_id, status, output) VALUES (?,?,?,?) "
                      "ON CONFLICT (run_id, step_id) DO UPDATE SET status = excluded.status, output = excluded.output",
                      (run_id, step.step_id, after, step.output_json))

    def _dead_letter(self, c, now: float, run_id: str, run_state: str, spec: DeadLetterSpec, actor: str) -> str:
        """Record the dead letter; quarantine when a redriven run fails the same way again."""
        got = c.execute("SELECT fingerprint, redrive_count FROM dead_letters WHERE run_id = ?", (run_id,)).fetchone()
        if got is not None and got[1] > 0 and got[0] == spec.fingerprint:
            c.execute("UPDATE dead_letters SET status = 'quarantined', quarantined = 1, reason = ?, step_id = ?, "
                      "error_class = ?, updated_at = ? WHERE run_id = ?",
                      (spec.reason, spec.step_id, spec.error_class, now, run_id))
            self._run_to(c, now, run_id, run_state, "quarantined", actor,
                         {"fingerprint": spec.fingerprint, "redrives": got[1],
                          "why": "the same failure repeated after a redrive"})
            return "quarantined"
        c.execute("INSERT INTO dead_letters (run_id, step_id, reason, error_class, fingerprint, redrive_count, "
                  "quarantined, status, created_at, updated_at) VALUES (?,?,?,?,?,0,0,'dead',?,?) "
                  "ON CONFLICT (run_id) DO UPDATE SET step_id = excluded.step_id, reason = excluded.reason, "
                  "error_class = excluded.error_class, fingerprint = excluded.fingerprint, status = 'dead', "
                  "updated_at = excluded.updated_at",
                  (run_id, spec.step_id, spec.reason, spec.error_class, spec.fingerprint, now, now))
        self._audit(c, now, run_id, spec.step_id, "dead_letter", actor, None, None,
                    {"reason": spec.reason, "error_class": spec.error_class, "fingerprint": spec.fingerprint})
        return run_state

    # -- operator actions --------------------------------------------------------------------------
    def cancel(self, run_id: str, now: float, *, actor: str, reason: str = "") -> RunRecord:
        with self._tx() as c:
            run = self._get_run(c, run_id)
            if run.state in ("cancelled", "cancelling"):
                return run
            active = c.execute(f"SELECT a.step_id, a.attempt, a.state, a.token FROM runs r JOIN attempts a ON "
                               f"{_CURSOR} WHERE r.id = ? AND a.state IN {_ACTIVE}", (run_id,)).fetchall()
            target = "cancelling" if any(a[2] == "running" for a in active) else "cancelled"
            self._run_to(c, now, run_id, run.state, target, actor, {"reason": reason} if reason else None)
            if target == "cancelled":
                for step_id, attempt, state, token in active:
                    self._step_to(c, now, run_id, step_id, state, "cancelled", actor)
                    c.execute("UPDATE attempts SET state = 'cancelled', token = ?, ended_at = ? WHERE run_id = ? AND "
                              "step_id = ? AND attempt = ?", (token + 1, now, run_id, step_id, attempt))
                c.execute("DELETE FROM timers WHERE run_id = ?", (run_id,))
                c.execute("DELETE FROM outbox WHERE run_id = ?", (run_id,))
            c.execute("UPDATE runs SET state = ?, rev = rev + 1, updated_at = ?, error_class = 'cancelled', "
                      "error_message = ? WHERE id = ?", (target, now, reason or f"cancelled by {actor}", run_id))
            return self._get_run(c, run_id)

    def redrive(self, run_id: str, next_attempt: NextAttempt, now: float, *, actor: str,
                deadline: float | None) -> Committed:
        with self._tx() as c:
            run = self._get_run(c, run_id)
            dl = c.execute("SELECT status FROM dead_letters WHERE run_id = ?", (run_id,)).fetchone()
            if dl is None or dl[0] != "dead":
                why = "it is quarantined (the same failure repeated after a redrive); fix the cause and submit a " \
                      "new run" if dl and dl[0] == "quarantined" else f"it is {run.state}, not in the dead-letter list"
                raise InvalidOperation(f"run {run_id} cannot be redriven: {why}")
            self._run_to(c, now, run_id, run.state, "queued", actor, {"redrive": run.redrives + 1})
            c.execute("UPDATE runs SET state = 'queued', rev = rev + 1, updated_at = ?, error_class = NULL, "
                      "error_message = NULL, redrives = redrives + 1, deadline = ? WHERE id = ?",
                      (now, deadline, run_id))
            c.execute("UPDATE dead_letters SET status = 'redriven', redrive_count = redrive_count + 1, updated_at = ? "
                      "WHERE run_id = ?", (now, run_id))
            if deadline is not None:
                c.execute("INSERT INTO timers (run_id, kind, fire_at) VALUES (?, 'run_deadline', ?)", (run_id, deadline))
            number, _ = self._insert_attempt(c, now, run_id, next_attempt, False, actor)
            c.execute("UPDATE runs SET cursor_step = ?, cursor_attempt = ? WHERE id = ?",
                      (next_attempt.step_id, number, run_id))
            return Committed(run.rev + 1, "queued")

    # -- reads -------------------------------------------------------------------------------------
    def ledger_get(self, tenant: str, key: str) -> LedgerRecord | None:
        got = self._read("SELECT tenant, key, run_id, step_id, result, created_at FROM ledger WHERE tenant = ? AND "
                         "key = ?", (tenant, key))
        return rows.ledger(got[0]) if got else None

    def dead_letters(self, *, include_redriven: bool = False) -> list[DeadLetterRecord]:
        where = "" if include_redriven else "WHERE status != 'redriven'"
        return [rows.dead_letter(r) for r in self._read(f"SELECT {rows.DLQ_COLS} FROM dead_letters {where} "
                                                        "ORDER BY updated_at")]

    def dead_letter(self, run_id: str) -> DeadLetterRecord | None:
        got = self._read(f"SELECT {rows.DLQ_COLS} FROM dead_letters WHERE run_id = ?", (run_id,))
        return rows.dead_letter(got[0]) if got else None

    def timers(self, run_id: str | None = None) -> list[TimerRecord]:
        sql = "SELECT id, run_id, step_id, attempt, token, kind, fire_at FROM timers"
        got = self._read(sql + " WHERE run_id = ? ORDER BY fire_at", (run_id,)) if run_id else \
            self._read(sql + " ORDER BY fire_at")
        return [rows.timer(r) for r in got]

    def outbox(self, run_id: str | None = None) -> list[OutboxRecord]:
        sql = "SELECT run_id, step_id, attempt, token, due_at, sent_at FROM outbox"
        got = self._read(sql + " WHERE run_id = ? ORDER BY due_at", (run_id,)) if run_id else \
            self._read(sql + " ORDER BY due_at")
        return [rows.outbox(r) for r in got]

    def audit(self, run_id: str | None = None, *, limit: int | None = None) -> list[AuditRecord]:
        lim = f" LIMIT {int(limit)}" if limit else ""
        if run_id is None:
            got = self._read(f"SELECT {rows.AUDIT_COLS} FROM audit ORDER BY id{lim}")
        else:
            got = self._read(f"SELECT {rows.AUDIT_COLS} FROM audit WHERE run_id = ? ORDER BY id{lim}", (run_id,))
        return [rows.audit(r) for r in got]
