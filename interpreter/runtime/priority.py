"""Run priority on the broker: one queue per priority, strict order in a worker, a starvation guard.

A run's ``priority:`` (``critical``, ``high``, ``normal``, ``low``) picks the Dramatiq queue its step
messages go to: ``<queue>.critical``, ``<queue>.high``, ``<queue>`` (normal keeps the plain name) and
``<queue>.low``, each with its own step actor. Separate queues give each priority **dedicated capacity**:

* on every broker (the embedded ``StubBroker``, Redis) each queue has its own consumer and its own
  prefetch in a worker, so a backlog of ``low`` messages never fills the buffer a ``critical`` one
  needs; inside a worker the threads take prefetched messages in priority order (the actor's Dramatiq
  ``priority``: critical 0, high 10, normal 20, low 30; first in, first out within one priority);
* a worker can be dedicated to some priorities (``sealflow worker --priorities critical,high``), so
  critical work has threads no low message can occupy;
* the dispatcher sends a batch of due messages in priority order.

**Starvation guard.** Strict order alone would let a steady stream of critical work hold ``low`` back
for ever. A message that has waited in a worker's buffer longer than ``starvation_after`` seconds
(runtime config ``priority: {starvation_after: 10s}``, the default) is taken before any message of
higher priority, oldest first. So each priority keeps moving at no less than its prefetch
(2 x threads messages) every ``starvation_after`` seconds, whatever runs above it.

**What a worker holds.** At DEBUG (``sealflow worker --log-level debug``) the work queue logs each step message
a consumer hands it, before any thread can take it (``run R: step S attempt N: fetched from QUEUE; K waiting
for a thread``): what a worker has buffered, and in what order its threads will find it.

This module relies on Dramatiq's ``Worker.work_queue`` (a ``PriorityQueue`` of items with
``priority`` and ``_queued_time``, Dramatiq 2.x): :func:`install_guard` replaces it before the worker
starts.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from queue import PriorityQueue
from typing import Any

from sealflow.core.errors import ConfigError

PRIORITIES = ("critical", "high", "normal", "low")
#: the Dramatiq actor priority of each run priority (lower goes first)
ACTOR_PRIORITY = {"critical": 0, "high": 10, "normal": 20, "low": 30}
DEFAULT_STARVATION_AFTER = 10.0

log = logging.getLogger("sealflow.priority")


def queue_for(base: str, priority: str) -> str:
    """The queue of ``priority``'s messages: the plain ``base`` for normal, else ``base.priority``."""
    return base if priority == "normal" else f"{base}.{priority}"


def actor_name_for(base_actor: str, priority: str) -> str:
    return base_actor if priority == "normal" else f"{base_actor}_{priority}"


def parse_priorities(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"critical,high"`` -> ``("critical", "high")``; None or empty: every priority. Unknown names are an
    error naming them."""
    if text is None:
        return PRIORITIES
    names = [p.strip() for p in (text.split(",") if isinstance(text, str) else text) if p.strip()]
    unknown = [p for p in names if p not in PRIORITIES]
    if unknown:
        raise ValueError(f"unknown priorit{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}; "
                         f"use some of: {', '.join(PRIORITIES)}")
    return tuple(p for p in PRIORITIES if p in names) or PRIORITIES


def starvation_after(extra: Mapping[str, Any] | None) -> float:
    """``priority.starvation_after`` of the runtime configuration's extra sections (seconds)."""
    from sealflow.providers.config import parse_duration

    section = (extra or {}).get("priority")
    if section is None:
        return DEFAULT_STARVATION_AFTER
    if not isinstance(section, Mapping) or set(map(str, section)) - {"starvation_after"}:
        raise ConfigError("priority: must be a map with the one key starvation_after (e.g. 10s)")
    seconds = parse_duration(section.get("starvation_after", DEFAULT_STARVATION_AFTER), "priority.starvation_after")
    return float(seconds)


class AgingQueue(PriorityQueue[Any]):
    """Dramatiq's work queue with the starvation guard: items in priority order, except that an item
    older than ``starvation_after`` seconds goes first (the oldest such)."""

    def __init__(self, starvation_after: float = DEFAULT_STARVATION_AFTER) -> None:
        super().__init__()
        self.starvation_ns = int(starvation_after * 1e9)

    def _put(self, item: Any) -> None:
        heapq.heappush(self.queue, item)
        if log.isEnabledFor(logging.DEBUG):  # (under the queue's lock: written before a thread can take it)
            log.debug("%s: fetched from %s; %d waiting for a thread", _named(getattr(item, "message", None)),
                      getattr(getattr(item, "message", None), "queue_name", "?"), len(self.queue))

    def _get(self) -> Any:
        queue = self.queue
        if len(queue) > 1:
            limit = time.monotonic_ns() - self.starvation_ns
            starved = [i for i, item in enumerate(queue) if getattr(item, "_queued_time", limit) < limit]
            if starved:
                pick = min(starved, key=lambda i: queue[i]._queued_time)
                if pick != 0:
                    item = queue[pick]
                    queue[pick] = queue[-1]
                    queue.pop()
                    heapq.heapify(queue)
                    return item
        return heapq.heappop(queue)


def _named(message: Any) -> str:
    """``run R: step S attempt N`` of a step message, or what else it is (the actor refuses a malformed one)."""
    args = getattr(message, "args", None)
    if isinstance(args, (tuple, list)) and len(args) >= 3:
        run_id, step_id, attempt = (str(a)[:100] for a in args[:3])  # (not checked yet: bounded)
        return f"run {run_id}: step {step_id} attempt {attempt}"
    return f"a message that is not a step message ({getattr(message, 'message_id', '?')})"


def install_guard(worker: Any, starvation_after_s: float) -> None:
    """Give a Dramatiq ``Worker`` (not yet started) the starvation guard."""
    worker.work_queue = AgingQueue(starvation_after_s)


class PriorityOf:
    """``run_id -> priority``, read from the store once per run (a run's priority never changes)."""

    def __init__(self, lookup: Callable[[str], str], *, size: int = 10_000) -> None:
        self._lookup = lookup
        self._seen: dict[str, str] = {}
        self._size = size
        self._lock = threading.Lock()

    def __call__(self, run_id: str) -> str:
        got = self._seen.get(run_id)
        if got is None:
            try:
                got = self._lookup(run_id)
            except Exception:  # noqa: BLE001 - an unknown run: its message is refused by the claim anyway
                return "normal"
            got = got if got in ACTOR_PRIORITY else "normal"
            with self._lock:
                if len(self._seen) >= self._size:
                    self._seen.clear()
                self._seen[run_id] = got
        return got

    def note(self, run_id: str, priority: str) -> None:
        with self._lock:
            self._seen[run_id] = priority
