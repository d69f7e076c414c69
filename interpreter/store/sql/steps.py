"""The step path of the SQLite store (a mixin of :class:`SqliteStore`): claim, commit, cancel, redrive.

Each method is one transaction (``BEGIN IMMEDIATE`` on SQLite; a writer's on PostgreSQL). The fences are
the attempt's token (:class:`FencingError`), then the run's revision (:class:`ConcurrencyError`): checked
before anything is written, or, for a commit written on the engine's view of the run (``Commit.seen``),
against that view (SQLite: before anything is written; PostgreSQL: before the transaction ends, a failed
check undoing everything the commit wrote, so that the check's read arrives with the commit's others and
costs no round trip of its own). Every state
change goes through ``_step_to`` / ``_run_to``, which refuse edges not in
:mod:`sealflow.core.states` (the transaction rolls back and the refusal is audited).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sealflow.core import states
from sealflow.core.clock import day_of
from sealflow.core.ids import StepRef, StepRole
from sealflow.store.auditchain import output_summary
from sealflow.store.coordination import Grant, SlotRequest
from sealflow.store.errors import (
    ClaimDeferred,
    ConcurrencyError,
    FencingError,
    InvalidOperation,
    MessageRefused,
    NotFound,
)
from sealflow.store.records import (
    AttemptRecord,
    Claimed,
    Commit,
    Committed,
    DeadLetterSpec,
    LazyResults,
    Message,
    NextAttempt,
    RunRecord,
    Spawn,
    StepChange,
)
from sealflow.store.sql import admission as sqlite_admission
from sealflow.store.sql import deliveries, reservations, rows
from sealflow.store.sql import slots as sqlite_slots
from sealflow.store.sql.conn import Conn, Cursor, Row

dumps = rows.dumps
_SET_RUN = ("rev = rev + 1, updated_at = ?, output = COALESCE(?, output), "
            "error_class = COALESCE(?, error_class), error_message = COALESCE(?, error_message), "
            "steps_executed = steps_executed + ?, tokens = tokens + ?, cost_usd = cost_usd + ?, "
            "tool_calls = tool_calls + ?, cursor_step = COALESCE(?, cursor_step), ")
#: a commit's update of its run: with the state when it moves, else without (setting a column rewrites the
#: entries of every index on it, even to the same value: two index pages fewer written per step)
_UPDATE_RUN = {True: "UPDATE runs SET state = ?, " + _SET_RUN, False: "UPDATE runs SET " + _SET_RUN}
_ACTIVE, _CURSOR, _A_COLS, _R_COLS, _N_ATTEMPT = rows.ACTIVE, rows.CURSOR, rows.A_COLS, rows.R_COLS, rows.N_ATTEMPT


new_token = rows.new_token


@functools.lru_cache(maxsize=8)
def _next_attempt(columns: str, returning: str) -> str:
    """Insert a step's next attempt (``run_id``, ``step_id``, then ``columns``), numbered one past its last."""
    marks = ", ".join("?" * len(columns.split(",")))
    return (f"INSERT INTO attempts (run_id, step_id, attempt, {columns}) SELECT ?, ?, COALESCE(MAX(attempt), 0) + 1, "
            f"{marks} FROM attempts WHERE run_id = ? AND step_id = ? RETURNING {returning}")


#: the ids of a run (the ``?``) and of every run above it (its parent, the parent's parent, ...; bounded)
_ANCESTORS = ("WITH RECURSIVE up(id, depth) AS (SELECT CAST(? AS TEXT), 0 UNION ALL SELECT r.parent_run_id, "
              "up.depth + 1 FROM runs r JOIN up ON r.id = up.id WHERE r.parent_run_id IS NOT NULL AND up.depth < 16) "
              "SELECT id FROM up")


class _Carried:
    """The attempt :meth:`StepPathMixin._insert_claimed` inserted, its row read on first use."""

    __slots__ = ("_cursor", "_row", "token")

    def __init__(self, cursor: Cursor, token: int):
        self._cursor, self.token = cursor, token
        self._row: Row | None = None

    def row(self) -> Row:
        if self._row is None:
            self._row = self._cursor.fetchone()  # (the insert returns its row: never None)
        return self._row


class StepPathMixin:
    #: check a commit's fence after writing it on the engine's view (``Commit.seen``) rather than before: where
    #: reading it first costs a round trip (PostgreSQL); SQLite reads it first, for nothing
    _fence_late = False

    if TYPE_CHECKING:  # the store's (sealflow.store.sql.store) and its fan-out's (sealflow.store.sql.children)
        def _pending_of(self, c: Any) -> list[Row]: ...  # the audit rows of ``c``'s transaction in progress
        def _tx(self) -> AbstractContextManager[Conn]: ...
        def _get_run(self, c: Conn, run_id: str) -> RunRecord: ...
        def results(self, run_id: str, only: Iterable[str] | None = None) -> dict[str, tuple[str, str | None]]: ...
        def _audit(self, c: Conn, now: float, run_id: str | None, step_id: str | None, event: str,
                   actor: str = "system", before: str | None = None, after: str | None = None,
                   detail: Mapping[str, Any] | None = None, chain: Mapping[str, Any] | None = None) -> None: ...
        def _step_to(self, c: Conn, now: float, run_id: str, step_id: str, before: str, after: str,
                     actor: str = "system", detail: Mapping[str, Any] | None = None,
                     chain: Mapping[str, Any] | None = None, *, slots: bool = True) -> None: ...
        def _run_to(self, c: Conn, now: float, run_id: str, before: str, after: str, actor: str = "system",
                    detail: Mapping[str, Any] | None = None, out: list[Message] | None = None) -> None: ...
        def _spawn(self, c: Conn, now: float, run_id: str, step_id: str, attempt: int, spawn: Spawn, actor: str,
                   inline: bool) -> list[Message]: ...
        def _close_fanout(self, c: Conn, now: float, run_id: str, step_id: str, attempt: int, actor: str,
                          undo: tuple[tuple[str, NextAttempt], ...] = (), out: list[Message] | None = None,
                          undo_seen: int | None = None) -> None: ...

    def _insert_attempt(self, c: Conn, now: float, run_id: str, nxt: NextAttempt, inline: bool, seq: int,
                        actor: str = "system", *, tenant: str | None = None,
                        first: bool = False) -> tuple[int, Message | None]:
        """Insert the run's next attempt (with its outbox row or timer); the caller moves the cursor.
        ``first``: the run is new (its first attempt is number 1, nothing to read back)."""
        token = new_token()
        values = (run_id, nxt.step_id, nxt.try_no, nxt.state, token, nxt.lease_ms, now, nxt.due_at,
                  None if nxt.data is None else dumps(nxt.data), seq)
        if first:
            number = 1
            c.execute("INSERT INTO attempts (run_id, step_id, attempt, try_no, state, token, lease_ms, scheduled_at, "
                      "due_at, data, seq) VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)", values)
        else:
            number = c.execute(_next_attempt("try_no, state, token, lease_ms, scheduled_at, due_at, data, seq",
                                             "attempt"), (*values, run_id, nxt.step_id)).fetchone()[0]
        self._step_to(c, now, run_id, nxt.step_id, "pending", nxt.state, actor,
                      None if nxt.try_no == 1 else {"attempt": number, "try": nxt.try_no, "due_at": nxt.due_at})
        if nxt.state == "scheduled":
            c.execute("INSERT INTO outbox (run_id, step_id, attempt, token, due_at, sent_at) VALUES (?,?,?,?,?,?)",
                      (run_id, nxt.step_id, number, token, nxt.due_at, now if inline else None))
            if not inline:
                return number, None
            if tenant is None:  # the caller did not have it at hand
                got = c.execute("SELECT tenant FROM runs WHERE id = ?", (run_id,)).fetchone()
                tenant = got and got[0]
            return number, Message(run_id, nxt.step_id, number, token, tenant)
        if nxt.timer_kind is not None:
            c.execute("INSERT INTO timers (run_id, step_id, attempt, token, kind, fire_at) VALUES (?,?,?,?,?,?)",
                      (run_id, nxt.step_id, number, token, nxt.timer_kind, nxt.due_at))
        return number, None

    def _insert_claimed(self, c: Conn, now: float, run_id: str, nxt: NextAttempt, seq: int, actor: str,
                        owner: str) -> _Carried:
        """Insert the run's next attempt (scheduled now) already claimed by ``owner``, the worker that goes on
        with the run: as :meth:`claim` would leave it (``running`` under its lease, the next token), with the
        same audit rows, and no outbox row (a lease that expires makes the sweep send it again). Its row is
        read back only when the commit is otherwise written (:meth:`_Carried.row`): on PostgreSQL the
        statements before it then cost one round trip, not one each."""
        token = new_token()
        got = c.execute(
            _next_attempt("try_no, state, token, lease_owner, lease_expires, lease_ms, scheduled_at, started_at, "
                          "due_at, data, seq", rows.ATTEMPT_COLS),
            (run_id, nxt.step_id, nxt.try_no, "running", token + 1, owner, now + nxt.lease_ms / 1000.0, nxt.lease_ms,
             now, now, nxt.due_at, None if nxt.data is None else dumps(nxt.data), seq, run_id, nxt.step_id))
        carried = _Carried(got, token)
        self._step_to(c, now, run_id, nxt.step_id, "pending", "scheduled", actor,
                      None if nxt.try_no == 1 else {"attempt": carried.row()[2], "try": nxt.try_no,
                                                    "due_at": nxt.due_at})
        self._step_to(c, now, run_id, nxt.step_id, "scheduled", "running", owner)
        self._merge_scheduled(c, nxt.step_id)
        return carried

    # -- the step path -----------------------------------------------------------------------------
    def claim(self, run_id: str, step_id: str, attempt: int, token: int, tenant: str | None = None, *, owner: str,
              now: float, running_limit: Callable[[str], int | None] | None = None,
              slots: Callable[[RunRecord, AttemptRecord, Callable[[], dict[str, tuple[str, str | None]]]],
                              Iterable[SlotRequest]] | None = None,
              slotless: bool = False) -> Claimed:
        refused: tuple[str, str] | None = None
        deferred: float | None = None
        busy: ClaimDeferred | None = None
        grants: tuple[Grant, ...] = ()
        with self._tx() as c:
            row = c.execute(f"SELECT {_A_COLS}, {_R_COLS} FROM attempts a JOIN runs r ON r.id = a.run_id "
                            "WHERE a.run_id = ? AND a.step_id = ? AND a.attempt = ?",
                            (run_id, step_id, attempt)).fetchone()
            if row is None:
                refused = ("unknown_attempt", "no such attempt")
            else:
                att, run = rows.attempt(row[:_N_ATTEMPT]), rows.run(row[_N_ATTEMPT:])
                before = att.state
                if tenant and tenant != run.tenant:  # naming another tenant says the most, whatever else is off
                    refused = ("tenant_mismatch", f"the message names tenant {tenant!r}, not the run's")
                elif att.token != token:
                    refused = ("stale_token", f"token {token} is not the attempt's current token")
                elif not (before == "scheduled" or (before == "waiting" and att.due_at is not None
                                                    and att.due_at <= now)):
                    refused = ("not_claimable", f"attempt is {before}")
                elif run.state not in states.RUN_CLAIMABLE:
                    refused = ("run_not_active", f"run is {run.state}")
                elif tenant is not None and tenant != run.tenant:  # (tenant ""): an older message's shape
                    refused = ("tenant_mismatch", "the message names no tenant")
            if refused is not None:
                self._audit(c, now, run_id, step_id, "message_refused", owner, None, None,
                            {"reason": refused[0], "detail": refused[1], "attempt": attempt,
                             **({"tenant": tenant} if tenant is not None else {})})
            elif running_limit is not None and before == "scheduled":  # the tenant's bulkhead
                deferred = sqlite_admission.defer_if_full(c, now, run.tenant, run_id, step_id, attempt, token,
                                                          running_limit)
            if refused is None and deferred is None and slots is not None and before == "scheduled":
                # locks and pools (store/coordination.py): all the attempt's slots, or wait in line for them
                grants, busy = sqlite_slots.take(c, now, run_id, step_id, attempt, token,
                                                 slots(run, att, lambda: self._results_of(c, run_id)),
                                                 arrived=(att.scheduled_at or now, run.created_at))
            if refused is None and deferred is None and busy is None:
                self._take(c, now, run, att, before, owner)
                results = LazyResults(functools.partial(self.results, run_id))  # on first use, outside the claim
        if refused is not None:
            raise MessageRefused(f"message for step {step_id!r} of run {run_id} refused: {refused[1]}", refused[0])
        if deferred is not None:
            raise ClaimDeferred(f"step {step_id!r} of run {run_id} put off {deferred:.2f}s: its tenant has "
                                "max_running_steps attempts running", deferred)
        if busy is not None:
            raise busy
        return Claimed(run, att, results, before == "waiting", grants)

    def _take(self, c: Conn, now: float, run: RunRecord, att: AttemptRecord, before: str, owner: str) -> None:
        """The claim's writes: the attempt runs under ``owner``'s lease with the next token; its outbox row goes."""
        run_id, step_id = run.id, att.step_id
        att.state, att.token, att.lease_owner = "running", att.token + 1, owner
        att.lease_expires = now + att.lease_ms / 1000.0
        att.started_at = att.started_at or now
        c.execute("UPDATE attempts SET state = 'running', token = ?, lease_owner = ?, lease_expires = ?, "
                  "started_at = ? WHERE run_id = ? AND step_id = ? AND attempt = ?",
                  (att.token, owner, att.lease_expires, att.started_at, run_id, step_id, att.attempt))
        c.execute("DELETE FROM outbox WHERE run_id = ? AND step_id = ? AND attempt = ?", (run_id, step_id, att.attempt))
        self._step_to(c, now, run_id, step_id, before, "running", owner)
        if run.state in ("queued", "waiting"):  # cancelling / compensating runs keep their state
            self._run_to(c, now, run_id, run.state, "running", owner)
            c.execute("UPDATE runs SET state = 'running', rev = rev + 1, updated_at = ? WHERE id = ?", (now, run_id))
            run.state, run.rev, run.updated_at = "running", run.rev + 1, now

    def _claim_carried(self, c: Conn, now: float, msg: Message, owner: str) -> Claimed | None:
        """Claim the attempt a commit just scheduled, for the worker that goes on with the run (same checks as
        :meth:`claim` makes of a message; None, nothing written, when one fails: the message goes out as usual)."""
        row = c.execute(f"SELECT {_A_COLS}, {_R_COLS} FROM attempts a JOIN runs r ON r.id = a.run_id "
                        "WHERE a.run_id = ? AND a.step_id = ? AND a.attempt = ?",
                        (msg.run_id, msg.step_id, msg.attempt)).fetchone()
        if row is None:
            return None
        att, run = rows.attempt(row[:_N_ATTEMPT]), rows.run(row[_N_ATTEMPT:])
        if att.token != msg.token or att.state != "scheduled" or run.state not in states.RUN_CLAIMABLE:
            return None
        self._take(c, now, run, att, "scheduled", owner)
        self._merge_scheduled(c, att.step_id)
        run_id = run.id
        return Claimed(run, att, LazyResults(functools.partial(self.results, run_id)))

    def _merge_scheduled(self, c: Conn, step_id: str) -> None:
        """One audit row for an attempt scheduled and claimed in one transaction (commit N, claim N + 1): the
        ``step.scheduled`` row this commit queued is folded into its ``step.running`` row, which then reads
        ``pending -> running`` and names who scheduled it (``detail.scheduled_by``, with the retry's attempt,
        try and due time when there were some). Nothing is lost: the two rows could never be apart (one
        transaction, one time), and the chain covers the merged row like any other."""
        pending = self._pending_of(c)
        running = pending[-1] if pending else None
        if running is None or running[1] != step_id or running[2] != "step.running":
            return
        for i in range(len(pending) - 2, -1, -1):
            row = pending[i]
            if row[1] == step_id and row[2] == "step.scheduled" and row[0] == running[0]:
                detail = {"scheduled_by": row[3], **(json.loads(row[6]) if row[6] else {})}
                pending[-1] = (running[0], step_id, "step.running", running[3], row[4], "running", dumps(detail),
                               running[7], running[8])
                del pending[i]
                return

    @staticmethod
    def _results_of(c: Conn, run_id: str) -> dict[str, tuple[str, str | None]]:
        return {r[0]: (r[1], r[2]) for r in
                c.execute("SELECT step_id, status, output FROM results WHERE run_id = ?", (run_id,))}

    def commit(self, commit: Commit, now: float) -> Committed:
        return self._commit(commit, now)

    @staticmethod
    def _check_fence(got: Row | None, commit: Commit, seen: Row | None = None) -> None:
        """Refuse the commit unless its attempt's token and its run's revision are current (and, for a commit
        written on the engine's view, unless that view is what the store holds)."""
        run_id, step = commit.run_id, commit.step
        if got is None:
            raise NotFound(f"no run {run_id!r}")
        if step is not None and (got[2] is None or got[3] != step.token):
            raise FencingError(f"step {step.step_id!r} attempt {step.attempt} of run {run_id}: token "
                               f"{step.token} is no longer current (lease expired or the attempt moved on); "
                               "nothing was changed")
        if got[1] != commit.expected_rev:
            raise ConcurrencyError(f"run {run_id} is at revision {got[1]}, not {commit.expected_rev}; "
                                   "re-read it and decide again")
        if seen is not None and tuple(got) != seen:
            raise ConcurrencyError(f"run {run_id} is not as it was read at revision {got[1]}; re-read it and "
                                   "decide again")

    def _commit(self, commit: Commit, now: float) -> Committed:
        with self._tx() as c:
            step = commit.step
            fence = c.execute("SELECT r.state, r.rev, a.state, a.token, r.tenant, r.parent_run_id FROM runs r "
                              "LEFT JOIN attempts a ON a.run_id = r.id AND a.step_id = ? AND a.attempt = ? "
                              "WHERE r.id = ?", (step and step.step_id, step and step.attempt, commit.run_id))
            seen = None if commit.seen is None or step is None else (
                commit.seen[0], commit.expected_rev, commit.seen[3], step.token, commit.seen[1], commit.seen[2])
            if seen is None or not self._fence_late:
                got = fence.fetchone()
                self._check_fence(got, commit, seen)
                return self._commit_checked(c, now, commit, got)
            # written on the engine's view of the run at the expected revision (Commit.seen), checked against
            # the store's before anything returns: on PostgreSQL the check's read costs no round trip of its own
            try:
                done = self._commit_checked(c, now, commit, seen)
            except Exception as exc:
                try:
                    got = fence.fetchone()
                except Exception:  # noqa: BLE001 - the store could not tell: the first failure is the one to raise
                    raise exc from None
                self._check_fence(got, commit, seen)  # a stale view fails as a stale commit, not as what it caused
                raise
            self._check_fence(fence.fetchone(), commit, seen)
            return done

    def _commit_checked(self, c: Conn, now: float, commit: Commit, got: Row) -> Committed:
        """The commit's writes, its fence ``got`` (run state, revision, attempt state, token, tenant, parent)."""
        run_id = commit.run_id
        step = commit.step
        run_state, rev, tenant = got[0], got[1], got[4]
        cur = got[2:4]
        actor = commit.actor
        # promoted fan-out children and a woken parent go out with a commit that dispatches inline
        out: list[Message] | None = [] if commit.dispatch_inline else None
        if step is not None:
            self._apply_step(c, now, run_id, cur[0], step, actor, commit.holds_slots)
        spawned: list[Message] = []
        if commit.spawn is not None and step is not None:  # a fan-out step starts its children
            spawned = self._spawn(c, now, run_id, step.step_id, step.attempt, commit.spawn, actor,
                                  commit.dispatch_inline)
        if commit.close_fanout and step is not None and step.state in states.STEP_FINAL:
            self._close_fanout(c, now, run_id, step.step_id, step.attempt, actor, commit.undo_children,
                               out, commit.undo_seen)
        if commit.ledger is not None:
            led = commit.ledger
            c.execute("INSERT INTO ledger (tenant, key, run_id, step_id, result, created_at) "
                      "VALUES (?,?,?,?,?,?) ON CONFLICT DO NOTHING",
                      (led.tenant, led.key, led.run_id, led.step_id, led.result_json, now))
        messages: tuple[Message, ...] = ()
        cursor: tuple[str | None, int | None] = (None, None)
        if commit.run.state == "compensating" and run_state != "compensating":
            # a run being undone has nothing else due: no deadline, no approval timeout, no message
            c.execute("DELETE FROM timers WHERE run_id = ?", (run_id,))
            c.execute("DELETE FROM outbox WHERE run_id = ?", (run_id,))
        ch = commit.run
        new_state = ch.state or run_state
        carried: _Carried | None = None
        if commit.next is not None:
            nxt = commit.next
            if commit.claim_as is not None and nxt.state == "scheduled" and commit.dispatch_inline \
                    and spawned == [] and commit.dead_letter is None and new_state in states.RUN_CLAIMABLE \
                    and new_state not in ("queued", "waiting"):
                # the worker goes on with the run (commit N, claim N + 1) and nothing this commit does can
                # stand in the way: the next attempt is inserted claimed (else it is claimed below)
                carried = self._insert_claimed(c, now, run_id, nxt, rev + 1, actor, commit.claim_as)
                cursor = (nxt.step_id, None)
            else:
                number, msg = self._insert_attempt(c, now, run_id, nxt, commit.dispatch_inline, rev + 1,
                                                   actor, tenant=tenant)
                cursor = (nxt.step_id, number)
                if msg is not None:
                    messages = (msg,)
        final_state = new_state
        if new_state != run_state:
            self._run_to(c, now, run_id, run_state, new_state, actor,
                         {"error_class": ch.error_class, "message": ch.error_message} if ch.error_class else None, out)
            if commit.dead_letter is not None:
                final_state = self._dead_letter(c, now, run_id, new_state, commit.dead_letter, actor, out)
            if final_state in states.RUN_FINAL:
                c.execute("DELETE FROM timers WHERE run_id = ?", (run_id,))
                c.execute("DELETE FROM outbox WHERE run_id = ?", (run_id,))
        moves = final_state != run_state
        set_run: tuple[Any, ...] = (now, ch.output_json, ch.error_class, ch.error_message, ch.add_steps,
                                    ch.add_tokens, ch.add_cost_usd, ch.add_tool_calls, cursor[0])
        if moves:
            set_run = (final_state, *set_run)
        if carried is None:
            c.execute(_UPDATE_RUN[moves] + "cursor_attempt = COALESCE(?, cursor_attempt) WHERE id = ?",
                      (*set_run, cursor[1], run_id))
            run_after = None
        else:  # the cursor: the attempt just inserted (its number is read back with the rest, below)
            base = commit.carry_from if commit.carry_from is not None and commit.carry_from.id == run_id else None
            run_after = c.execute(_UPDATE_RUN[moves] + "cursor_attempt = (SELECT MAX(attempt) FROM attempts WHERE "
                                  "run_id = ? AND step_id = ?) WHERE id = ? RETURNING "
                                  + (rows.RUN_CHANGING if base is not None else rows.RUN_COLS),
                                  (*set_run, run_id, cursor[0], run_id))
        if got[5] is not None and (ch.add_steps or ch.add_tokens or ch.add_cost_usd or ch.add_tool_calls):
            # a child's usage (a fan-out item's, a called workflow's) counts against every run above it, up to
            # the root: added, never written whole, and without moving their revisions (their waiting attempts
            # are not disturbed)
            c.execute("UPDATE runs SET steps_executed = steps_executed + ?, tokens = tokens + ?, "
                      "cost_usd = cost_usd + ?, tool_calls = tool_calls + ? WHERE id IN (" + _ANCESTORS + ")",
                      (ch.add_steps, ch.add_tokens, ch.add_cost_usd, ch.add_tool_calls, got[5]))
        if ch.add_tokens or ch.add_cost_usd:  # the tenant's daily usage (quotas)
            c.execute(sqlite_admission.USAGE_UPSERT, (day_of(now), ch.add_tokens, ch.add_cost_usd, run_id))
        if commit.step is not None and commit.holds_reservation:  # settled by this charge: its reservation goes
            c.execute(reservations.DROP, (reservations.key_of(run_id, commit.step.step_id, commit.step.attempt),))
        for ev in commit.audit:
            self._audit(c, now, run_id, ev.step_id, ev.event, ev.actor, ev.state_before, ev.state_after, ev.detail,
                        ev.chain_fields())
        if commit.notifications:  # the gate this commit opens: its notifications, in the same transaction
            deliveries.insert(c, now, run_id, commit.notifications)
        claimed = None
        if carried is not None:  # inserted claimed (above): both rows read back now, in one round trip
            att = rows.attempt(carried.row())
            assert run_after is not None  # (updated with the attempt inserted claimed, above)
            row = run_after.fetchone()
            run = rows.run(row) if base is None else rows.run_over(base, row)  # (unchanging fields: the engine's)
            claimed = Claimed(run, att, LazyResults(functools.partial(self.results, run_id)))
            messages = (Message(run_id, att.step_id, att.attempt, carried.token, tenant),)
        elif commit.claim_as is not None and len(messages) == 1 and not spawned \
                and final_state in states.RUN_CLAIMABLE:
            claimed = self._claim_carried(c, now, messages[0], commit.claim_as)  # commit N, claim N + 1
        if out:
            return Committed(rev + 1, final_state, messages + tuple(spawned) + tuple(out), claimed)
        return Committed(rev + 1, final_state, messages + tuple(spawned), claimed)

    def _apply_step(self, c: Conn, now: float, run_id: str, before: str, step: StepChange, actor: str,
                    slots: bool = True) -> None:
        after = step.state
        self._step_to(c, now, run_id, step.step_id, before, after, actor,
                      {"error_class": step.error_class, "message": step.error_message} if step.error_class else None,
                      None if step.output_json is None else {"summary": output_summary(step.output_json)},
                      slots=slots)
        final = after in states.STEP_FINAL
        c.execute("UPDATE attempts SET state = ?, output = COALESCE(?, output), error_class = ?, error_message = ?, "
                  "error_trace = COALESCE(?, error_trace), "
                  "due_at = COALESCE(?, due_at), data = COALESCE(?, data), ended_at = ?, "
                  "lease_owner = CASE WHEN ? THEN NULL ELSE lease_owner END, "
                  "lease_expires = CASE WHEN ? THEN NULL ELSE lease_expires END "
                  "WHERE run_id = ? AND step_id = ? AND attempt = ?",
                  (after, step.output_json, step.error_class, step.error_message, step.error_trace, step.due_at,
                   None if step.data is None else dumps(step.data), now if final else None,
                   after != "running", after != "running", run_id, step.step_id, step.attempt))
        if before in ("waiting", "retry_wait") and after != before:
            c.execute("DELETE FROM timers WHERE run_id = ? AND step_id = ? AND attempt = ?",
                      (run_id, step.step_id, step.attempt))
        if step.timer_kind is not None and step.due_at is not None:
            c.execute("INSERT INTO timers (run_id, step_id, attempt, token, kind, fire_at) VALUES (?,?,?,?,?,?)",
                      (run_id, step.step_id, step.attempt, step.token, step.timer_kind, step.due_at))
        if final and StepRef.parse(step.step_id).role is StepRole.STEP:
            c.execute("INSERT INTO results (run_id, step_id, status, output) VALUES (?,?,?,?) "
                      "ON CONFLICT (run_id, step_id) DO UPDATE SET status = excluded.status, output = excluded.output",
                      (run_id, step.step_id, after, step.output_json))

    def _dead_letter(self, c: Conn, now: float, run_id: str, run_state: str, spec: DeadLetterSpec, actor: str,
                     out: list[Message] | None = None) -> str:
        """Record the dead letter; quarantine when a redriven run fails the same way again (a run
        going ``quarantined`` itself, after a failed compensation, gets a quarantined letter)."""
        quarantine = run_state == "quarantined"
        got = c.execute("SELECT fingerprint, redrive_count FROM dead_letters WHERE run_id = ?", (run_id,)).fetchone()
        if not quarantine and got is not None and got[1] > 0 and got[0] == spec.fingerprint:
            c.execute("UPDATE dead_letters SET status = 'quarantined', quarantined = 1, reason = ?, step_id = ?, "
                      "error_class = ?, updated_at = ? WHERE run_id = ?",
                      (spec.reason, spec.step_id, spec.error_class, now, run_id))
            self._run_to(c, now, run_id, run_state, "quarantined", actor,
                         {"fingerprint": spec.fingerprint, "redrives": got[1],
                          "why": "the same failure repeated after a redrive"}, out)
            return "quarantined"
        c.execute("INSERT INTO dead_letters (run_id, step_id, reason, error_class, fingerprint, redrive_count, "
                  "quarantined, status, created_at, updated_at) VALUES (?,?,?,?,?,0,?,?,?,?) "
                  "ON CONFLICT (run_id) DO UPDATE SET step_id = excluded.step_id, reason = excluded.reason, "
                  "error_class = excluded.error_class, fingerprint = excluded.fingerprint, status = excluded.status, "
                  "quarantined = excluded.quarantined, updated_at = excluded.updated_at",
                  (run_id, spec.step_id, spec.reason, spec.error_class, spec.fingerprint, int(quarantine),
                   "quarantined" if quarantine else "dead", now, now))
        self._audit(c, now, run_id, spec.step_id, "dead_letter", actor, None, None,
                    {"reason": spec.reason, "error_class": spec.error_class, "fingerprint": spec.fingerprint,
                     **({"quarantined": True} if quarantine else {})})
        return run_state

    # -- operator actions --------------------------------------------------------------------------
    def cancel(self, run_id: str, now: float, *, actor: str, reason: str = "") -> RunRecord:
        with self._tx() as c:
            run = self._get_run(c, run_id)
            if run.state in ("cancelled", "cancelling", "compensating"):  # compensating: undoing must finish
                return run
            self._cancel_in(c, now, run, actor, reason)
            return self._get_run(c, run_id)

    def _cancel_in(self, c: Conn, now: float, run: RunRecord, actor: str, reason: str,
                   out: list[Message] | None = None) -> None:
        """Cancel ``run`` (not cancelled, cancelling or compensating) inside the transaction ``c`` (``out``: the
        messages of the commit in progress that dispatches inline, if it is one)."""
        run_id = run.id
        active = c.execute(f"SELECT a.step_id, a.attempt, a.state, a.token FROM runs r JOIN attempts a ON "
                           f"{_CURSOR} WHERE r.id = ? AND a.state IN {_ACTIVE}", (run_id,)).fetchall()
        target = "cancelling" if any(a[2] == "running" for a in active) else "cancelled"
        self._run_to(c, now, run_id, run.state, target, actor, {"reason": reason} if reason else None, out)
        if target == "cancelled":
            for step_id, attempt, state, token in active:
                self._step_to(c, now, run_id, step_id, state, "cancelled", actor)
                c.execute("UPDATE attempts SET state = 'cancelled', token = ?, ended_at = ? WHERE run_id = ? AND "
                          "step_id = ? AND attempt = ?", (token + 1, now, run_id, step_id, attempt))
            c.execute("DELETE FROM timers WHERE run_id = ?", (run_id,))
            c.execute("DELETE FROM outbox WHERE run_id = ?", (run_id,))
        c.execute("UPDATE runs SET state = ?, rev = rev + 1, updated_at = ?, error_class = 'cancelled', "
                  "error_message = ? WHERE id = ?", (target, now, reason or f"cancelled by {actor}", run_id))

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
                c.execute("INSERT INTO timers (run_id, kind, fire_at) VALUES (?, 'run_deadline', ?)",
                          (run_id, deadline))
            number, _ = self._insert_attempt(c, now, run_id, next_attempt, False, run.rev + 1, actor)
            c.execute("UPDATE runs SET cursor_step = ?, cursor_attempt = ? WHERE id = ?",
                      (next_attempt.step_id, number, run_id))
            return Committed(run.rev + 1, "queued")
