"""Child runs of fan-out steps (``map`` items, ``parallel`` branches): a mixin of :class:`SqliteStore` (and so
of the PostgreSQL store, through its dialect).

A fan-out step's attempt goes ``waiting`` and creates its children in the same commit (:meth:`_spawn`): one
run per item or branch, keyed ``(parent run, step, attempt, index)`` (a unique index: a redelivered attempt
cannot create them twice, and its commit is fenced anyway). The first ``concurrency`` children are ``queued``
with their first attempt scheduled; the others stay ``created`` with a ``pending`` first attempt, which no
worker can claim. The ``fanouts`` row of the attempt counts them.

Whenever a child run ends, in the transaction that ends it (:meth:`_fanout_moved`, called from ``_run_to``):
the counters move; the next pending sibling is promoted to ``queued`` (so at most ``concurrency`` children
are in flight, across every worker and host: the store is the pool); and when every child has ended, or more
have failed than tolerated, the parent's waiting attempt is made due with an outbox row, so a worker claims
it and decides the step (:mod:`sealflow.steps.fanout`). Nothing is held in memory: a crash
between any two transactions leaves either the child not ended (it is redone by the sweeps like any run) or
ended with its promotion and wake-up written.

When the parent's attempt ends (:meth:`_close_fanout`), or the parent run is cancelled or times out
(:meth:`_cancel_children`), the children still in flight are cancelled: pending ones at once, running ones
cooperatively (``cancelling``, as ``sealflow cancel`` does).

A failed fan-out undoes its completed children one at a time, newest completed first (``runs.updated_at`` of a
completed child is when its completing commit ran; ties: the higher index first). The commit that fails the
step queues each one's first compensation attempt, ``pending`` (the child stays ``completed``), and starts the
newest (:meth:`_undo_next`: ``completed -> compensating``, the attempt scheduled); the transaction that ends a
child's undo (``cancelled``, or ``quarantined`` when a compensation failed for good) starts the next, as a
pending item is promoted. A crash between two transactions leaves one child compensating (its attempt is
recovered like any, its compensations replayed from the ledger, never redone) and the rest queued.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sealflow.core import states
from sealflow.store.errors import ConcurrencyError
from sealflow.store.records import CALL_INDEX, ChildRecord, Message, NextAttempt, RunRecord, Spawn
from sealflow.store.sql import rows
from sealflow.store.sql.conn import Conn, Row
from sealflow.store.sql.statements import OUTBOX_PUT, PLAN_PUT

SCHEMA = """
ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
ALTER TABLE runs ADD COLUMN parent_step_id TEXT;
ALTER TABLE runs ADD COLUMN parent_attempt INTEGER;
ALTER TABLE runs ADD COLUMN item_index INTEGER;
ALTER TABLE runs ADD COLUMN item TEXT;
CREATE UNIQUE INDEX runs_children ON runs(parent_run_id, parent_step_id, parent_attempt, item_index)
  WHERE parent_run_id IS NOT NULL;
CREATE TABLE fanouts (
  run_id TEXT NOT NULL, step_id TEXT NOT NULL, attempt INTEGER NOT NULL,
  total INTEGER NOT NULL, concurrency INTEGER NOT NULL, tolerated INTEGER NOT NULL,
  started INTEGER NOT NULL, ended INTEGER NOT NULL DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL DEFAULT 'open',
  PRIMARY KEY (run_id, step_id, attempt)
);
"""
PG_SCHEMA = SCHEMA.replace("INTEGER", "BIGINT")

#: a run going to one of these stops its fan-out children
STOPPING = states.RUN_FINAL | {"cancelling", "compensating"}
_CHILD_COLS = "id, item_index, state, output, error_class, error_message, updated_at"
_OPEN = "('created','queued','running','waiting','cancelling','compensating')"


def child_id(parent: str, step_id: str, attempt: int, index: int) -> str:
    """A child run's id: readable, and the same for the same item of the same attempt (a called workflow's run,
    index ``CALL_INDEX``: no index, ``<parent>.<step>``)."""
    step = step_id if len(parent) + len(step_id) < 100 else hashlib.sha256(step_id.encode()).hexdigest()[:12]
    return f"{parent}.{step}{'' if attempt == 1 else f'~{attempt}'}" + ("" if index == CALL_INDEX else f".{index}")


class ChildrenMixin:
    if TYPE_CHECKING:  # the store's (sealflow.store.sql.store) and its step path's (sealflow.store.sql.steps)
        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]: ...
        def _get_run(self, c: Conn, run_id: str) -> RunRecord: ...
        def _audit(self, c: Conn, now: float, run_id: str | None, step_id: str | None, event: str,
                   actor: str = "system", before: str | None = None, after: str | None = None,
                   detail: Mapping[str, Any] | None = None, chain: Mapping[str, Any] | None = None) -> None: ...
        def _step_to(self, c: Conn, now: float, run_id: str, step_id: str, before: str, after: str,
                     actor: str = "system", detail: Mapping[str, Any] | None = None,
                     chain: Mapping[str, Any] | None = None, *, slots: bool = True) -> None: ...
        def _run_to(self, c: Conn, now: float, run_id: str, before: str, after: str, actor: str = "system",
                    detail: Mapping[str, Any] | None = None, out: list[Message] | None = None) -> None: ...
        def _insert_attempt(self, c: Conn, now: float, run_id: str, nxt: NextAttempt, inline: bool, seq: int,
                            actor: str = "system", *, tenant: str | None = None,
                            first: bool = False) -> tuple[int, Message | None]: ...
        def _cancel_in(self, c: Conn, now: float, run: RunRecord, actor: str, reason: str,
                       out: list[Message] | None = None) -> None: ...

    # -- reads -----------------------------------------------------------------------------------
    def children(self, run_id: str, step_id: str | None = None, attempt: int | None = None, *,
                 offset: int = 0, limit: int = 100_000) -> list[ChildRecord]:
        """The child runs of ``run_id`` (of one fan-out step and attempt when given), in index order."""
        cond, args = rows.where(("parent_run_id = ?", run_id), ("parent_step_id = ?", step_id),
                                ("parent_attempt = ?", attempt))
        got = self._read(f"SELECT {_CHILD_COLS} FROM runs{cond} "
                         "ORDER BY parent_step_id, parent_attempt, item_index LIMIT ? OFFSET ?",
                         (*args, limit, offset))
        return [ChildRecord(r[0], r[1], r[2], None if r[3] is None else rows.loads(r[3]), r[4], r[5], r[6])
                for r in got]

    def child_counts(self, run_id: str) -> dict[tuple[str, int], dict[str, int]]:
        """``(step, attempt) -> {state: count}`` of the child runs of ``run_id``."""
        got = self._read("SELECT parent_step_id, parent_attempt, state, COUNT(*) FROM runs WHERE parent_run_id = ? "
                         "GROUP BY parent_step_id, parent_attempt, state", (run_id,))
        counts: dict[tuple[str, int], dict[str, int]] = {}
        for step_id, attempt, state, n in got:
            counts.setdefault((step_id, int(attempt)), {})[state] = int(n)
        return counts

    def run_usage(self, run_id: str) -> tuple[int, int, float, int, float | None]:
        """What a run has spent (steps, tokens, cost, tool calls) and its deadline, without reading the rest."""
        got = self._read("SELECT steps_executed, tokens, cost_usd, tool_calls, deadline FROM runs WHERE id = ?",
                         (run_id,))
        if not got:
            from sealflow.store.errors import NotFound

            raise NotFound(f"no run {run_id!r}")
        return got[0][0], got[0][1], got[0][2], got[0][3], got[0][4]

    def fanout(self, run_id: str, step_id: str, attempt: int) -> dict[str, Any] | None:
        """The counters of a fan-out attempt: total, concurrency, tolerated, started, ended, failed, state."""
        got = self._read("SELECT total, concurrency, tolerated, started, ended, failed, state FROM fanouts "
                         "WHERE run_id = ? AND step_id = ? AND attempt = ?", (run_id, step_id, attempt))
        if not got:
            return None
        return dict(zip(("total", "concurrency", "tolerated", "started", "ended", "failed", "state"), got[0],
                        strict=True))

    # -- inside a transaction ----------------------------------------------------------------------
    def _spawn(self, c: Conn, now: float, run_id: str, step_id: str, attempt: int, spawn: Spawn, actor: str,
               inline: bool) -> list[Message]:
        """Create the children of a fan-out attempt (the caller's commit makes that attempt ``waiting``)."""
        parent = c.execute("SELECT tenant, workflow, workflow_version, NULL, initiator, input_hash, priority, "
                           "acting_as, access_mode, signer FROM runs WHERE id = ?", (run_id,)).fetchone()
        for digest, workflow, version, body in spawn.plans:
            c.execute(PLAN_PUT, (digest, workflow, version, body, now))
        started = min(spawn.concurrency, len(spawn.children))
        # the waiting attempt is due only when its children wake it (_wake): no claim before that
        c.execute("UPDATE attempts SET due_at = NULL WHERE run_id = ? AND step_id = ? AND attempt = ?",
                  (run_id, step_id, attempt))
        c.execute("INSERT INTO fanouts (run_id, step_id, attempt, total, concurrency, tolerated, started) "
                  "VALUES (?,?,?,?,?,?,?)", (run_id, step_id, attempt, len(spawn.children), spawn.concurrency,
                                             spawn.tolerated, started))
        messages: list[Message] = []
        for child in spawn.children:
            cid = child_id(run_id, step_id, attempt, child.index)
            queued = child.index < started
            called = child.call
            # a fan-out child's input is its parent's (read with the parent's results); a called run has its own
            workflow, version, input_json, input_hash, deadline = (parent[1], parent[2], "null", parent[5], None) \
                if called is None else (called.workflow, called.version, called.input_json, called.input_hash,
                                        called.deadline)
            c.execute("INSERT INTO runs (id, tenant, workflow, workflow_version, plan_digest, input, state, rev, "
                      "initiator, input_hash, created_at, updated_at, cursor_step, cursor_attempt, priority, "
                      "acting_as, access_mode, signer, parent_run_id, parent_step_id, parent_attempt, item_index, "
                      "item, deadline) VALUES (?,?,?,?,?,?,?,1,?,?,?,?,?,1,?,?,?,?,?,?,?,?,?,?)",
                      (cid, parent[0], workflow, version, child.plan_digest, input_json,
                       "queued" if queued else "created", parent[4], input_hash, now, now, child.first_step,
                       parent[6], parent[7], parent[8], parent[9], run_id, step_id, attempt, child.index,
                       child.item_json, deadline))
            self._audit(c, now, cid, None, "run.created", actor, None, "created",
                        {"parent": run_id, "step": step_id, "index": child.index, "plan": child.plan_digest,
                         **({} if called is None else {"workflow": workflow, "version": version})})
            if queued:
                self._run_to(c, now, cid, "created", "queued", actor)
                _, msg = self._insert_attempt(c, now, cid, NextAttempt(child.first_step, 1, "scheduled", now,
                                                                       child.first_lease_ms), inline, 1, actor,
                                              tenant=parent[0], first=True)
                if msg is not None:
                    messages.append(msg)
            else:
                c.execute("INSERT INTO attempts (run_id, step_id, attempt, try_no, state, token, lease_ms, "
                          "scheduled_at, data, seq) VALUES (?,?,1,1,'pending',?,?,?,NULL,1)",
                          (cid, child.first_step, rows.new_token(), child.first_lease_ms, now))
        return messages

    def _fanout_moved(self, c: Conn, now: float, run_id: str, state: str, ended: bool, error_class: str | None,
                      actor: str, out: list[Message] | None = None) -> None:
        """A run ended or is stopping. A child that ended: count it, promote its next pending sibling, and wake
        the parent's attempt once every child ended, more failed than tolerated, or one failed with
        ``budget_exceeded`` (a budget stops the whole fan-out, whatever the tolerance). A parent stopping
        (cancelled, timed out, compensating): its children in flight are cancelled. ``out``: the messages of
        the commit in progress, dispatched inline with it (None: the dispatcher sends them, see :meth:`_send`)."""
        got = c.execute("SELECT r.parent_run_id, r.parent_step_id, r.parent_attempt, f.total, f.concurrency, "
                        "f.tolerated, f.started, f.ended, f.failed, f.state FROM runs r LEFT JOIN fanouts f ON "
                        "f.run_id = r.parent_run_id AND f.step_id = r.parent_step_id AND f.attempt = r.parent_attempt "
                        "WHERE r.id = ?", (run_id,)).fetchone()
        if got is None:
            return
        if got[0] is None:  # not a child: maybe a parent
            self._cancel_children(c, now, run_id, actor, out)
            return
        if state in STOPPING and state != "completed":  # a called run stopping stops its own children too
            self._cancel_children(c, now, run_id, actor, out)
        if not ended or got[3] is None:
            return
        parent, step_id, attempt = got[:3]
        total, _, tolerated, started, ended_n, failed, fan_state = got[3:]
        if fan_state == "closed":  # the step has ended: a child ending now may let the next undo start
            self._undo_next(c, now, parent, step_id, attempt, run_id, actor, out)
            return
        ended_n, failed = ended_n + 1, failed + (state != "completed")
        wake = fan_state == "open" and (ended_n >= total or failed > tolerated or error_class == "budget_exceeded")
        if fan_state == "open" and not wake:
            started = self._promote(c, now, parent, step_id, attempt, started, total, out)
        c.execute("UPDATE fanouts SET ended = ?, failed = ?, started = ?, state = ? WHERE run_id = ? AND "
                  "step_id = ? AND attempt = ?", (ended_n, failed, started, "woken" if wake else fan_state,
                                                 parent, step_id, attempt))
        if wake:
            self._wake(c, now, parent, step_id, attempt, out)

    def _promote(self, c: Conn, now: float, parent: str, step_id: str, attempt: int, started: int, total: int,
                 out: list[Message] | None) -> int:
        """Queue the next pending child (skipping any cancelled meanwhile); return the new ``started``."""
        while started < total:
            index = started
            started += 1
            got = c.execute("SELECT r.id, r.state, r.tenant, r.cursor_step, a.token FROM runs r JOIN attempts a ON "
                            "a.run_id = r.id AND a.step_id = r.cursor_step AND a.attempt = 1 WHERE r.parent_run_id = ? "
                            "AND r.parent_step_id = ? AND r.parent_attempt = ? AND r.item_index = ?",
                            (parent, step_id, attempt, index)).fetchone()
            if got is None or got[1] != "created":
                continue
            cid, _, tenant, first, token = got
            self._run_to(c, now, cid, "created", "queued", "fanout")
            c.execute("UPDATE runs SET state = 'queued', rev = rev + 1, updated_at = ? WHERE id = ?", (now, cid))
            self._step_to(c, now, cid, first, "pending", "scheduled", "fanout")
            c.execute("UPDATE attempts SET state = 'scheduled', scheduled_at = ?, due_at = ? WHERE run_id = ? AND "
                      "step_id = ? AND attempt = 1", (now, now, cid, first))
            self._send(c, now, Message(cid, first, 1, token, tenant), out)
            return started
        return started

    def _wake(self, c: Conn, now: float, parent: str, step_id: str, attempt: int, out: list[Message] | None) -> None:
        """Make the parent's waiting fan-out attempt due now (a worker claims it and decides the step)."""
        got = c.execute("SELECT a.state, a.token, r.tenant FROM attempts a JOIN runs r ON r.id = a.run_id "
                        "WHERE a.run_id = ? AND a.step_id = ? AND a.attempt = ?", (parent, step_id, attempt)).fetchone()
        if got is None or got[0] != "waiting":
            return
        c.execute("UPDATE attempts SET due_at = ? WHERE run_id = ? AND step_id = ? AND attempt = ?",
                  (now, parent, step_id, attempt))
        self._audit(c, now, parent, step_id, "fanout_done", "fanout", None, None, {"attempt": attempt})
        self._send(c, now, Message(parent, step_id, attempt, got[1], got[2]), out)

    @staticmethod
    def _send(c: Conn, now: float, msg: Message, out: list[Message] | None) -> None:
        """An outbox row for ``msg``; with ``out`` (the messages of a commit that dispatches inline) written sent
        and added to them, else left for the dispatcher."""
        c.execute(OUTBOX_PUT, (msg.run_id, msg.step_id, msg.attempt, msg.token, now,
                               now if out is not None else None))
        if out is not None:
            out.append(msg)

    def _close_fanout(self, c: Conn, now: float, run_id: str, step_id: str, attempt: int, actor: str,
                      undo: tuple[tuple[str, NextAttempt], ...] = (), out: list[Message] | None = None,
                      undo_seen: int | None = None) -> None:
        """The fan-out attempt ended: no child starts any more; those in flight are cancelled; the completed
        children in ``undo`` (child id, first compensation attempt: engine/fanout.py) are queued to be undone,
        one at a time, newest completed first (:meth:`_undo_next`). The undo was decided on ``undo_seen``
        completed children: if another completed since, the commit is refused as a conflict
        (:class:`ConcurrencyError`) and decided again."""
        if undo_seen is not None:
            now_done = c.execute("SELECT COUNT(*) FROM runs WHERE parent_run_id = ? AND parent_step_id = ? AND "
                                 "parent_attempt = ? AND state = 'completed'", (run_id, step_id, attempt)).fetchone()[0]
            if now_done != undo_seen:
                raise ConcurrencyError(f"an item of step {step_id!r} of run {run_id} completed while the step "
                                       "failed; decide its undoing again")
        got = c.execute("UPDATE fanouts SET state = 'closed' WHERE run_id = ? AND step_id = ? AND attempt = ? "
                        "AND state <> 'closed'", (run_id, step_id, attempt)).rowcount
        if got:
            self._cancel_open(c, now, "parent_run_id = ? AND parent_step_id = ? AND parent_attempt = ?",
                              (run_id, step_id, attempt), actor, out)
        for child, first in undo:
            self._queue_undo(c, now, child, first)
        if undo:
            self._undo_next(c, now, run_id, step_id, attempt, None, actor, out)

    def _queue_undo(self, c: Conn, now: float, child: str, first: NextAttempt) -> None:
        """A completed child's first compensation attempt, ``pending`` (no worker can claim it) until
        :meth:`_undo_next` starts it: the child stays ``completed`` meanwhile (nothing of it is undone yet)."""
        got = c.execute("SELECT state, parent_run_id, rev FROM runs WHERE id = ?", (child,)).fetchone()
        if got is None or got[0] != "completed" or got[1] is None:
            return
        number = c.execute("SELECT COALESCE(MAX(attempt), 0) + 1 FROM attempts WHERE run_id = ? AND step_id = ?",
                           (child, first.step_id)).fetchone()[0]
        c.execute("INSERT INTO attempts (run_id, step_id, attempt, try_no, state, token, lease_ms, scheduled_at, "
                  "data, seq) VALUES (?,?,?,1,'pending',?,?,?,?,?)",
                  (child, first.step_id, number, rows.new_token(), first.lease_ms, now,
                   None if first.data is None else rows.dumps(first.data), got[2] + 1))

    def _undo_next(self, c: Conn, now: float, parent: str, step_id: str, attempt: int, ending: str | None,
                   actor: str, out: list[Message] | None) -> None:
        """Start the undoing of the newest completed child of the fan-out attempt whose undo is queued, unless a
        sibling (other than ``ending``, the child whose end calls this) is compensating: children of a failed
        fan-out are undone one at a time, newest completed first (ties: the higher index first). Called by the
        commit that closes the fan-out and by the one that ends each child afterwards, so the next starts in
        the transaction that ends the previous one's undo."""
        where = "r.parent_run_id = ? AND r.parent_step_id = ? AND r.parent_attempt = ?"
        nxt = c.execute(f"SELECT r.id, r.tenant, a.step_id, a.attempt, a.token, a.data FROM runs r JOIN "
                        "attempts a ON a.run_id = r.id AND a.state = 'pending' "
                        f"WHERE {where} AND r.state = 'completed' ORDER BY r.updated_at DESC, r.item_index DESC "
                        "LIMIT 1", (parent, step_id, attempt)).fetchone()
        if nxt is None:
            return
        busy = c.execute(f"SELECT 1 FROM runs r WHERE {where} AND r.state = 'compensating' AND r.id <> ? LIMIT 1",
                         (parent, step_id, attempt, ending or "")).fetchone()
        if busy is not None:
            return
        cid, tenant, comp_step, number, token, data = nxt
        data = {} if data is None else rows.loads(data)
        why = data.get("why")
        self._run_to(c, now, cid, "completed", "compensating", actor, {"why": why}, out)
        self._audit(c, now, cid, None, "compensation.started", actor, None, None,
                    {"steps": [comp_step.split("@")[0], *(data.get("queue") or ())], "then": "cancelled"})
        self._step_to(c, now, cid, comp_step, "pending", "scheduled", actor)
        c.execute("UPDATE attempts SET state = 'scheduled', scheduled_at = ?, due_at = ? WHERE run_id = ? AND "
                  "step_id = ? AND attempt = ?", (now, now, cid, comp_step, number))
        c.execute("UPDATE runs SET state = 'compensating', rev = rev + 1, updated_at = ?, error_class = 'cancelled', "
                  "error_message = ?, cursor_step = ?, cursor_attempt = ? WHERE id = ?",
                  (now, why, comp_step, number, cid))
        self._send(c, now, Message(cid, comp_step, number, token, tenant), out)

    def _cancel_children(self, c: Conn, now: float, run_id: str, actor: str, out: list[Message] | None) -> None:
        """The parent run was cancelled or timed out: every child still in flight is cancelled."""
        if c.execute("UPDATE fanouts SET state = 'closed' WHERE run_id = ? AND state <> 'closed'",
                     (run_id,)).rowcount:
            self._cancel_open(c, now, "parent_run_id = ?", (run_id,), actor, out)

    def _cancel_open(self, c: Conn, now: float, where: str, args: tuple[Any, ...], actor: str,
                     out: list[Message] | None) -> None:
        ids = [r[0] for r in c.execute(f"SELECT id FROM runs WHERE {where} AND state IN {_OPEN} ORDER BY item_index",
                                       args).fetchall()]
        for cid in ids:
            run = self._get_run(c, cid)
            if run.state not in states.RUN_FINAL and run.state not in ("cancelling", "compensating"):
                self._cancel_in(c, now, run, actor, "its fan-out step ended", out)
