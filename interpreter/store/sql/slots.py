"""Lease slots on the SQLite store (and, through its dialect, the PostgreSQL store): the SQL of
:mod:`sealflow.store.coordination`, run inside the caller's transaction.

Tables (migration 8 on SQLite, 6 on PostgreSQL): ``slot_names`` (per name: the last fencing token, the
last waiting ticket, the limit last asked for), ``slot_holders`` (who holds a slot; ``step_id = ''`` and
``attempt = 0`` for a run-scope holder) and ``slot_waiters`` (who waits, by ticket).

A holder row is *live* while its attempt is ``running`` with an unexpired lease (attempt scope) or its
run is not final (run scope); rows that are not live are deleted before anything is counted, so a dead
holder never keeps a slot past its lease. A waiter row is live while its attempt is ``scheduled`` in a
claimable run.
"""

from __future__ import annotations

from collections.abc import Iterable

from sealflow.core import states
from sealflow.store.coordination import RECHECK_S, Grant, SlotHolder, SlotRequest, SlotsBusy
from sealflow.store.sql.conn import Conn
from sealflow.store.sql.statements import OUTBOX_PUT

SCHEMA = """
CREATE TABLE slot_names (
  name TEXT PRIMARY KEY, fence INTEGER NOT NULL DEFAULT 0, ticket INTEGER NOT NULL DEFAULT 0,
  lim INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE slot_holders (
  name TEXT NOT NULL, run_id TEXT NOT NULL, step_id TEXT NOT NULL, attempt INTEGER NOT NULL,
  fence INTEGER NOT NULL, since REAL NOT NULL, PRIMARY KEY (name, run_id, step_id, attempt)
);
CREATE INDEX slot_holders_run ON slot_holders(run_id, step_id);
CREATE TABLE slot_waiters (
  name TEXT NOT NULL, ticket INTEGER NOT NULL, run_id TEXT NOT NULL, step_id TEXT NOT NULL,
  attempt INTEGER NOT NULL, arrived REAL NOT NULL, since REAL NOT NULL, PRIMARY KEY (name, ticket)
);
CREATE INDEX slot_waiters_run ON slot_waiters(run_id, step_id, attempt);
"""

_FINAL = "(" + ",".join(f"'{s}'" for s in sorted(states.RUN_FINAL)) + ")"
_CLAIMABLE = "(" + ",".join(f"'{s}'" for s in sorted(states.RUN_CLAIMABLE)) + ")"
_LAST = 2**62  # a ticket after every other
_REAP_HOLDERS = (
    "DELETE FROM slot_holders WHERE name = ? AND NOT ("
    f"(step_id = '' AND EXISTS (SELECT 1 FROM runs r WHERE r.id = slot_holders.run_id AND r.state NOT IN {_FINAL})) "
    "OR (step_id <> '' AND EXISTS (SELECT 1 FROM attempts a WHERE a.run_id = slot_holders.run_id AND "
    "a.step_id = slot_holders.step_id AND a.attempt = slot_holders.attempt AND a.state = 'running' AND "
    "a.lease_expires > ?)))")
_REAP_WAITERS = (
    "DELETE FROM slot_waiters WHERE name = ? AND NOT EXISTS (SELECT 1 FROM attempts a JOIN runs r ON "
    "r.id = a.run_id WHERE a.run_id = slot_waiters.run_id AND a.step_id = slot_waiters.step_id AND "
    f"a.attempt = slot_waiters.attempt AND a.state = 'scheduled' AND r.state IN {_CLAIMABLE})")


def _reap(c: Conn, now: float, name: str) -> None:
    c.execute(_REAP_HOLDERS, (name, now))
    c.execute(_REAP_WAITERS, (name,))


def _ahead(c: Conn, name: str, run_id: str, step_id: str, attempt: int, arrived: float) -> tuple[int | None, int]:
    """(the claimant's ticket or None, how many live waiters of ``name`` arrived before it: earlier
    ``arrived``, then earlier ticket)."""
    got = c.execute("SELECT ticket FROM slot_waiters WHERE name = ? AND run_id = ? AND step_id = ? AND attempt = ?",
                    (name, run_id, step_id, attempt)).fetchone()
    ticket = None if got is None else got[0]
    before = c.execute("SELECT COUNT(*) FROM slot_waiters WHERE name = ? AND (arrived < ? OR (arrived = ? AND "
                       "ticket < ?))", (name, arrived, arrived, _LAST if ticket is None else ticket)).fetchone()[0]
    return ticket, before


def take(c: Conn, now: float, run_id: str, step_id: str, attempt: int, token: int,
         requests: Iterable[SlotRequest], *,
         arrived: tuple[float, float]) -> tuple[tuple[Grant, ...], SlotsBusy | None]:
    """All of ``requests`` for the attempt, or none: (grants, None), or ((), the :class:`SlotsBusy` to raise
    after the transaction commits: the attempt joined the waiting list of each busy name and its outbox row
    is due again later). ``arrived``: when the attempt was scheduled and when the run was created; a
    waiting list is ordered by the first for attempt slots, by the second for run slots (so the order is
    the order work became ready, not the order messages happened to be claimed)."""
    grants: list[Grant] = []
    todo: list[tuple[SlotRequest, str, int]] = []
    busy: list[tuple[SlotRequest, int | None, int, float]] = []
    for req in sorted(set(requests), key=lambda r: r.name):
        holder = (run_id, "", 0) if req.scope == "run" else (run_id, step_id, attempt)
        if req.scope == "run":
            held = c.execute("SELECT fence FROM slot_holders WHERE name = ? AND run_id = ? AND step_id = ''",
                             (req.name, run_id)).fetchone()
            if held is not None:  # the run took it at an earlier attempt
                grants.append(Grant(req.name, held[0], "run"))
                continue
        _reap(c, now, req.name)
        c.execute("INSERT INTO slot_names (name, fence, ticket, lim) VALUES (?, 0, 0, ?) ON CONFLICT DO NOTHING",
                  (req.name, req.limit))
        c.execute("UPDATE slot_names SET lim = ? WHERE name = ? AND lim <> ?", (req.limit, req.name, req.limit))
        holding = c.execute("SELECT COUNT(*) FROM slot_holders WHERE name = ?", (req.name,)).fetchone()[0]
        when = arrived[1] if req.scope == "run" else arrived[0]
        ticket, ahead = _ahead(c, req.name, run_id, step_id, attempt, when)
        if holding + ahead < req.limit:
            todo.append((req, *holder[1:]))
        else:
            busy.append((req, ticket, ahead, when))
    if busy:
        for req, ticket, _ahead_n, when in busy:
            if ticket is None:  # join the waiting list, last
                c.execute("UPDATE slot_names SET ticket = ticket + 1 WHERE name = ?", (req.name,))
                nxt = c.execute("SELECT ticket FROM slot_names WHERE name = ?", (req.name,)).fetchone()[0]
                c.execute("INSERT INTO slot_waiters (name, ticket, run_id, step_id, attempt, arrived, since) "
                          "VALUES (?,?,?,?,?,?,?)", (req.name, nxt, run_id, step_id, attempt, when, now))
        due = _recheck_at(c, now, [b[0].name for b in busy])
        c.execute(OUTBOX_PUT, (run_id, step_id, attempt, token, due, None))
        req, _, position, _ = busy[0]
        what = "lock" if req.limit == 1 and req.name.startswith("lock:") else f"{req.limit} slot(s) of"
        return (), SlotsBusy(f"step {step_id!r} of run {run_id} waits for {what} {req.name!r} "
                             f"({position} waiting before it); checked again in {due - now:.1f}s or when "
                             "a holder lets go", due - now, req.name, position)
    for req, h_step, h_attempt in todo:
        c.execute("UPDATE slot_names SET fence = fence + 1 WHERE name = ?", (req.name,))
        fence = c.execute("SELECT fence FROM slot_names WHERE name = ?", (req.name,)).fetchone()[0]
        c.execute("INSERT INTO slot_holders (name, run_id, step_id, attempt, fence, since) VALUES (?,?,?,?,?,?)",
                  (req.name, run_id, h_step, h_attempt, fence, now))
        c.execute("DELETE FROM slot_waiters WHERE name = ? AND run_id = ? AND step_id = ? AND attempt = ?",
                  (req.name, run_id, step_id, attempt))
        grants.append(Grant(req.name, fence, req.scope))
    return tuple(sorted(grants, key=lambda g: g.name)), None


def _recheck_at(c: Conn, now: float, names: list[str]) -> float:
    """When a waiter checks again without being woken: when the earliest holder's lease ends (a dead
    holder gives its slot back then), at most :data:`RECHECK_S` from now."""
    due = now + RECHECK_S
    for name in names:
        got = c.execute("SELECT MIN(a.lease_expires) FROM slot_holders h JOIN attempts a ON a.run_id = h.run_id "
                        "AND a.step_id = h.step_id AND a.attempt = h.attempt WHERE h.name = ? AND "
                        "a.state = 'running'", (name,)).fetchone()
        if got and got[0] is not None:
            due = min(due, max(got[0], now) + 0.01)
    return due


def _wake(c: Conn, now: float, name: str) -> None:
    """Make the first waiters of ``name`` due now, as many as there are free slots."""
    _reap(c, now, name)
    got = c.execute("SELECT lim FROM slot_names WHERE name = ?", (name,)).fetchone()
    if got is None:
        return
    holding = c.execute("SELECT COUNT(*) FROM slot_holders WHERE name = ?", (name,)).fetchone()[0]
    free = got[0] - holding
    if free <= 0:
        return
    first = c.execute("SELECT run_id, step_id, attempt FROM slot_waiters WHERE name = ? ORDER BY arrived, ticket "
                      "LIMIT ?",
                      (name, free)).fetchall()
    for run_id, step_id, attempt in first:
        c.execute("UPDATE outbox SET due_at = ? WHERE run_id = ? AND step_id = ? AND attempt = ? AND "
                  "sent_at IS NULL AND due_at > ?", (now, run_id, step_id, attempt, now))


def release_attempt(c: Conn, now: float, run_id: str, step_id: str) -> None:
    """The step's running attempt ended (any way): give back its attempt-scope slots, wake waiters."""
    names = [r[0] for r in c.execute("SELECT name FROM slot_holders WHERE run_id = ? AND step_id = ?",
                                     (run_id, step_id)).fetchall()]
    if names:
        c.execute("DELETE FROM slot_holders WHERE run_id = ? AND step_id = ?", (run_id, step_id))
        for name in names:
            _wake(c, now, name)


def release_run(c: Conn, now: float, run_id: str) -> None:
    """The run is final: give back every slot it holds, leave every waiting list, wake waiters."""
    names = [r[0] for r in c.execute("SELECT name FROM slot_holders WHERE run_id = ?", (run_id,)).fetchall()]
    c.execute("DELETE FROM slot_waiters WHERE run_id = ?", (run_id,))
    if names:
        c.execute("DELETE FROM slot_holders WHERE run_id = ?", (run_id,))
        for name in sorted(set(names)):
            _wake(c, now, name)


def listing(c: Conn, now: float, name: str | None = None) -> list[SlotHolder]:
    """Live holders, then waiters in order, of ``name`` (or of every name)."""
    names = [name] if name else [r[0] for r in c.execute("SELECT name FROM slot_names ORDER BY name").fetchall()]
    out: list[SlotHolder] = []
    for n in names:
        _reap(c, now, n)
        for run_id, step_id, attempt, fence, since in c.execute(
                "SELECT run_id, step_id, attempt, fence, since FROM slot_holders WHERE name = ? ORDER BY fence",
                (n,)).fetchall():
            out.append(SlotHolder(n, run_id, step_id or None, attempt or None, fence, since))
        waiting = c.execute("SELECT run_id, step_id, attempt, since FROM slot_waiters WHERE name = ? "
                            "ORDER BY arrived, ticket", (n,)).fetchall()
        for i, (run_id, step_id, attempt, since) in enumerate(waiting):
            out.append(SlotHolder(n, run_id, step_id, attempt, None, since, i))
    return out
