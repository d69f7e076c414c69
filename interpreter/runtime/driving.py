"""Driving a run on: the embedded worker loop until a run settles, waiting while another process executes it."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from dramatiq.brokers.stub import StubBroker

from sealflow.core import states
from sealflow.engine import capability
from sealflow.engine.poison import OUTCOME_UNKNOWN
from sealflow.runtime import readiness
from sealflow.runtime.status import RunStatus
from sealflow.store.errors import StoreUnavailable
from sealflow.store.records import AttemptRecord, Message, RunRecord

if TYPE_CHECKING:
    import dramatiq

    from sealflow.core.clock import Clock
    from sealflow.engine.engine import Engine
    from sealflow.runtime.dispatcher import Dispatcher
    from sealflow.runtime.sweeper import Sweeper
    from sealflow.store.base import Store

log = logging.getLogger("sealflow.run")

#: how often ``drive`` looks again at a run waiting in line for a lock or pool slot (seconds)
_SLOT_POLL_S = 0.1
#: how often `drive` looks again at a run whose step another process executes
_ELSEWHERE_POLL_S = 0.05
#: how often `drive` asks the store whether the message another process took was left there (it lacked what
#: the step needs): then this process takes the step over, or says why it waits
_LEFT_POLL_S = 1.0
#: how long the command line's ``drive`` rides out a store server that does not answer (a PostgreSQL restart,
#: a failover) before it gives up with the store's error (``Runtime.store_outage_s``; 0, the library's default:
#: the error goes up at once); the run is safe in the store meanwhile, and its steps go on once it answers
STORE_OUTAGE_S = 300.0
#: the first and the longest pause between two looks at a store that does not answer (seconds)
_OUTAGE_FIRST_S, _OUTAGE_MAX_S = 0.5, 10.0


class Driving:
    """Methods of :class:`~sealflow.runtime.facade.Runtime` (see its module); they use its store,
    engine, broker and clock."""

    #: seconds ``drive`` rides out a store server that does not answer (0: not at all; the command line sets
    #: :data:`STORE_OUTAGE_S`); a step whose commit the store lost is then also waited for until its lease ends
    store_outage_s: float = 0.0

    if TYPE_CHECKING:  # the facade's (runtime/facade.py), which these methods use
        store: Store
        engine: Engine
        broker: dramatiq.Broker
        clock: Clock
        owner: str
        dispatcher: Dispatcher
        sweeper: Sweeper
        redeliver_after: float
        sleep_threshold: float

        @property
        def queue_names(self) -> tuple[str, ...]: ...
        def start(self) -> None: ...
        def status(self, run_id: str, *, tenant: str | None = None, actor: str | None = None,
                   children_offset: int = 0) -> RunStatus: ...
        def send(self, message: Message, priority: str | None = None) -> None: ...

    def drive(self, run_id: str, *, until: str = "settled", timeout: float | None = None,
              sleep_threshold: float | None = None) -> RunStatus:
        """Dispatch, work and sweep until the run settles: it is final, waits for a human (an
        approval), or waits for a timer more than ``sleep_threshold`` seconds away (shorter ones
        are slept through; ``until="final"`` sleeps through timers of any length). ``timeout``
        bounds the real time spent here."""
        if until not in ("settled", "final"):
            raise ValueError("until must be 'settled' or 'final'")
        self.start()
        threshold = self.sleep_threshold if sleep_threshold is None else sleep_threshold
        stop_at = None if timeout is None else time.monotonic() + timeout
        idle_rounds = 0
        left_looked = 0.0
        taken_over: set[tuple[str, int, int]] = set()
        outage: list[float] = []  # when the store stopped answering, and the next pause
        while True:
            try:
                verdict = self._drive_round(run_id, until, threshold, stop_at, idle_rounds, left_looked, taken_over)
            except StoreUnavailable as exc:
                self._ride_out(exc, outage, stop_at)
                continue
            if outage:
                log.warning("the store answers again after %.0f s; going on with run %s",
                            time.monotonic() - outage[0], run_id)
                outage.clear()
            if verdict is None:
                break
            idle_rounds, left_looked = verdict
        while True:
            try:
                return readiness.note_left(self, self.status(run_id))
            except StoreUnavailable as exc:
                self._ride_out(exc, outage, stop_at)

    def _ride_out(self, exc: StoreUnavailable, outage: list[float], stop_at: float | None) -> None:
        """A store server that did not answer (``rides_out_outages``: PostgreSQL): wait and look again, saying
        so, until ``store_outage_s`` (or the caller's timeout) has passed; then the store's error goes up. With
        ``store_outage_s`` 0, and on a SQLite file's error (disk full, read-only), it goes up at once."""
        limit = self.store_outage_s
        if not limit or not self.store.rides_out_outages:  # (a SQLite file: say it now)
            raise exc
        now = time.monotonic()
        if not outage:
            outage[:] = [now, _OUTAGE_FIRST_S]
        waited, pause = now - outage[0], outage[1]
        if waited + pause > limit or (stop_at is not None and now + pause > stop_at):
            raise exc
        log.warning("%s; retrying in %.1f s (%.0f s so far; the run is safe in the store and goes on once it "
                    "answers)", exc, pause, waited)
        time.sleep(pause)
        outage[1] = min(pause * 2, _OUTAGE_MAX_S)

    def _drive_round(self, run_id: str, until: str, threshold: float, stop_at: float | None, idle_rounds: int,
                     left_looked: float, taken_over: set[tuple[str, int, int]]) -> tuple[int, float] | None:
        """One look at the run (see :meth:`drive`): None when it has settled (or the time is up), else the
        idle rounds and when the left step was looked at, for the next round."""
        while True:
            sent = self.dispatcher.flush()
            self._join()
            report = self.sweeper.sweep()
            if sent or report.runs_touched:
                idle_rounds = 0
                continue
            run = self.store.get_run(run_id)
            if run.state in states.RUN_FINAL or (run.state == "waiting" and self._awaits_human(run_id)):
                return None
            if run_id in self.engine.left and not report.redelivered:  # its step needs what this process lacks
                return None
            due = self.store.next_due(run_id, redeliver_after=self.redeliver_after)
            fanned = self._children_due(run_id)  # a fan-out step waits for child runs: their next due time
            if fanned is not None:
                due = fanned if due is None else min(due, fanned)
            if stop_at is not None and time.monotonic() >= stop_at:
                return None
            active = self.store.active_attempt(run_id)
            elsewhere = self._worked_elsewhere(run_id, active)
            # running under this process's lease with nothing here running it (_join waited for that): its
            # result was lost (the store went away as it committed); the lease's end sends it again, soon
            orphaned = self.store_outage_s > 0 and active is not None and active.state == "running" \
                and active.lease_owner == self.owner
            if elsewhere and time.monotonic() - left_looked >= _LEFT_POLL_S:
                left_looked = time.monotonic()
                verdict = self._take_over_left(run, taken_over)
                if verdict == "taken":
                    idle_rounds = 0
                    continue
                if verdict == "lacking":  # left elsewhere, and this process lacks it too: say why it waits
                    return None
            if due is None and not elsewhere:
                return None
            delay = _ELSEWHERE_POLL_S if due is None else due - self.clock.now()
            if delay > _SLOT_POLL_S and self._waits_in_line(run_id):  # a holder elsewhere may let go any time
                delay = _SLOT_POLL_S
            if elsewhere:  # another process runs its step (or took its message): wait for that, not its lease
                delay = min(delay, _ELSEWHERE_POLL_S)
            elif until == "settled" and delay > threshold and not orphaned:
                return None
            idle_rounds += 1
            self.clock.sleep(max(delay, 0.001 * min(idle_rounds, 50)))
            return idle_rounds, left_looked

    def _children_due(self, run_id: str) -> float | None:
        """When the first child run of the fan-out step the run waits on has something due (None: the run
        does not wait on one, or its children wait only for people); a child worked elsewhere counts as now."""
        active = self.store.active_attempt(run_id)
        if active is None or active.state != "waiting" or "fanout" not in active.data:
            return None
        due: float | None = None
        for child in self.store.children(run_id, active.step_id, active.attempt):
            if child.state in states.RUN_FINAL or child.state == "created":
                continue
            got = self.clock.now() if self._worked_elsewhere(child.id, self.store.active_attempt(child.id)) else \
                self.store.next_due(child.id, redeliver_after=self.redeliver_after)
            if got is not None:
                due = got if due is None else min(due, got)
        return due

    def _worked_elsewhere(self, run_id: str, active: AttemptRecord | None) -> bool:
        """Another process executes the run's step now (its ``active`` attempt runs under another lease owner),
        or took its message to do so: `run` waits for that to end instead of returning with the run mid-way."""
        if active is not None and active.state == "running" and active.lease_owner != self.owner:
            return True
        return any(row.sent_at is not None for row in self.store.outbox(run_id))

    def _take_over_left(self, run: RunRecord, taken_over: set[tuple[str, int, int]]) -> str | None:
        """When the run's next attempt is due and was left by another process (it took the message but lacks
        what the step needs: audited ``step.left``): ``"taken"`` once this process, which executes its own
        messages and has what the step needs, sent the attempt to itself (the claim is fenced: whoever claims
        first runs it, once); ``"lacking"`` when this process lacks it too; else None (nothing left)."""
        active = self.store.active_attempt(run.id)
        if active is None or active.state != "scheduled" or (active.due_at or 0.0) > self.clock.now():
            return None
        if not capability.left_elsewhere(self.store, run.id, active.step_id, active.attempt, self.owner):
            return None
        if capability.step_lacks(self.engine, run, active.step_id):
            return "lacking"
        key = (active.step_id, active.attempt, active.token)
        if key in taken_over or not readiness.executes_here(self):
            return None
        taken_over.add(key)
        self.send(Message(run.id, active.step_id, active.attempt, active.token, run.tenant))
        return "taken"

    def _waits_in_line(self, run_id: str) -> bool:
        """The run's next attempt is scheduled but put off: it waits for a lock, pool or bulkhead slot."""
        active = self.store.active_attempt(run_id)
        return active is not None and active.state == "scheduled"

    def awaits_human(self, run_id: str) -> bool:
        """Whether the run's current attempt waits for a person (an approval gate, an outcome-unknown gate)."""
        return self._awaits_human(run_id)

    def _awaits_human(self, run_id: str) -> bool:
        active = self.store.active_attempt(run_id)
        return active is not None and active.state == "waiting" and (
            "opened_at" in active.data or OUTCOME_UNKNOWN in active.data)

    def _join(self) -> None:
        if isinstance(self.broker, StubBroker):
            queues = self.queue_names
            while True:
                for name in queues:
                    self.broker.join(name, fail_fast=False)
                if not any(self.broker.queues[n].unfinished_tasks for n in queues):
                    return
        else:
            time.sleep(0.05)
