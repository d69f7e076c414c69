"""A long-lived worker takes over the steps other processes left because they lacked what the steps need.

A worker without a run's action module, model, secret or trust policy (a deployment mid-upgrade) leaves the
step it was sent and audits ``step.left`` (:mod:`sealflow.engine.capability`); its outbox row stays
sent. Before, only a redelivery (every ``--redeliver-after``, 60 s by default) could bring the message to a
worker that has what is needed, and the broker might hand it to the same incapable worker again, so a step
could wait minutes. Handing the message back to the broker at once does not help: the leaving worker's own
consumer, awake, takes it first (tried, and reverted: ``git log``).

So the capable worker pulls: every :data:`EVERY_S` seconds :class:`LeftSteps` reads the ``step.left`` events
appended since its last look (a range of the audit log's ids), and for each attempt another process left that
is still sent and unclaimed and whose step this process can run, handles the message itself on a thread of its
own (at most :data:`AT_ONCE` at a time, and at most ``_QUEUED`` waiting; a worker that stops gives them its
``--grace``, as its other attempts). The claim is fenced by the attempt's token: if the redelivery reaches
some worker meanwhile, only one of them runs the step, once. A step this process lacks too keeps waiting for
its redelivery, as before.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from sealflow.engine import capability
from sealflow.store.errors import NotFound, StoreError
from sealflow.store.records import Message

log = logging.getLogger("sealflow.worker")

#: how often a worker looks for steps left by others (seconds)
EVERY_S = 1.0
#: takeovers running at once in one process (each runs one step on a thread of its own)
AT_ONCE = 2
#: ``step.left`` events read a look at most; steps queued for a takeover thread at most (past it, a left step
#: waits for its redelivery, as before)
_BATCH, _QUEUED = 500, 100
#: how far back (audit events) the first look starts: steps left just before this worker started
_LOOKBACK = 5000


class LeftSteps:
    """The steps other processes left, as one worker sees them (see the module docstring)."""

    def __init__(self, runtime: Any, *, every: float = EVERY_S, at_once: int = AT_ONCE):
        self.rt, self.every = runtime, every
        self._after: int | None = None  # the last audit id read
        self._running: set[tuple[str, str, int]] = set()  # queued or running
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[tuple[str, str, int], Message] | None] = queue.Queue(maxsize=_QUEUED)
        # daemon threads: a takeover still running when the process exits is abandoned like any attempt past
        # the worker's grace (its lease ends and the step runs again elsewhere)
        self._threads = [threading.Thread(target=self._serve, name=f"sealflow-takeover-{i}", daemon=True)
                         for i in range(at_once)]
        for thread in self._threads:
            thread.start()
        self._next = 0.0

    def close(self, timeout: float | None = None) -> list[tuple[str, str, int]]:
        """Take nothing more; wait up to ``timeout`` seconds (None: for ever) for the takeovers queued or running
        to end; the ones still running then (abandoned when the process exits)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for _ in self._threads:
            while True:
                try:
                    self._queue.put(None, timeout=0.1)  # one stop per thread, after what is queued
                    break
                except queue.Full:
                    if deadline is not None and time.monotonic() >= deadline:
                        break
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        with self._lock:
            return sorted(self._running)

    def maybe_check(self) -> int:
        """:meth:`check` when :attr:`every` seconds have passed since the last one; the steps taken over."""
        now = time.monotonic()
        if now < self._next:
            return 0
        self._next = now + self.every
        return self.check()

    def check(self) -> int:
        """Read the ``step.left`` events appended since the last look and take over each left step that is
        still sent and unclaimed and that this process can run; the steps taken over. (What this process can
        run does not change while it lives, so a step it lacks is not looked at again: its redelivery stays.)"""
        store, actor = self.rt.store, self.rt.engine.actor
        if self._after is None:
            self._after = max(0, store.audit_last_id() - _LOOKBACK)
        taken = 0
        for event in store.audit(event=capability.LEFT_EVENT, after=self._after, limit=_BATCH):
            self._after = max(self._after, event.id)
            attempt = (event.detail or {}).get("attempt")
            if event.actor == actor or event.run_id is None or event.step_id is None or not isinstance(attempt, int):
                continue  # (left by this process: it lacks what the step needs)
            key = (event.run_id, event.step_id, attempt)
            message = self._still_left(key)
            if message is not None and self._take(key, message, event.actor):
                taken += 1
        return taken

    def _still_left(self, key: tuple[str, str, int]) -> Message | None:
        """The left attempt's message while it is sent and unclaimed and this process can run its step; else
        None (claimed or gone, or this process lacks what the step needs too)."""
        run_id, step_id, attempt = key
        row = next((r for r in self.rt.store.outbox(run_id) if (r.step_id, r.attempt) == (step_id, attempt)), None)
        if row is None or row.sent_at is None:
            return None  # claimed (the claim deletes the row), or due to be sent again by a dispatcher
        try:
            run = self.rt.store.get_run(run_id)
        except NotFound:
            return None
        if capability.step_lacks(self.rt.engine, run, step_id):
            return None
        return Message(run_id, step_id, attempt, row.token, run.tenant)

    def _take(self, key: tuple[str, str, int], message: Message, left_by: str) -> bool:
        with self._lock:
            if key in self._running:
                return False
            try:
                self._queue.put_nowait((key, message))
            except queue.Full:  # (past it a left step waits for its redelivery)
                return False
            self._running.add(key)
        log.info("taking over step %r (attempt %d) of run %s, left by %s", message.step_id, message.attempt,
                 message.run_id, left_by)
        return True

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            key, message = item
            try:
                # fenced: a redelivered copy elsewhere finds it claimed
                for due in self.rt.engine.handle(*message).messages:
                    self.rt.send(due)
            except StoreError as exc:  # its lease ends, or the redelivery brings it again: nothing is lost
                log.warning("taking over step %r of run %s failed: %s", message.step_id, message.run_id, exc)
            except Exception:  # noqa: BLE001 - one step's trouble must not stop the worker
                log.exception("taking over step %r of run %s failed", message.step_id, message.run_id)
            finally:
                with self._lock:
                    self._running.discard(key)
