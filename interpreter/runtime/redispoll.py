"""Redis consumers that poll slowly while idle and wake at once when work may have come.

Dramatiq's Redis consumer has no blocking fetch: an empty fetch (a Lua script, about 0.27 ms of this
process's CPU and 0.09 ms of Redis's) is followed by a sleep that doubles up to the worker timeout. A
``sealflow worker`` consumes ten queues (five run priorities, each with its Dramatiq delay queue), and its
worker timeout is short (it bounds how long a stop takes), so an idle or half-busy worker polled Redis about
a hundred times a second: measured, 8.7 scripts per run where a run needs two (fetch and acknowledge), and a
sixth of a worker's CPU per step (docs/benchmarks.md, fifth round).

:class:`WakingRedisBroker` keeps Dramatiq's consumer and its backoff, but caps an idle consumer's sleep at
:data:`IDLE_POLL_MS` (Dramatiq's own default worker timeout) instead of the worker timeout, and ends the
sleep early when this process has a reason to look again:

* it sent a message to the queue itself (the dispatcher sending due work from the store's outbox, or a
  step actor sending a run's next step): the message is fetched at once, by this process if it has room;
* a message of the queue was acknowledged or rejected here while the consumer could not fetch because its
  prefetch was full (it has room again);
* the worker is shutting down: sleeps go back to the worker timeout, so the stop is not held up.

Work another process sends to an idle queue here is fetched within :data:`IDLE_POLL_MS`; a queue that is
fetching is polled as often as before (Dramatiq's backoff starts again at 5 ms after every message). The
store stays the truth either way: a message found later is only a later start, never a lost one.
"""

from __future__ import annotations

import threading
from typing import Any

import redis
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer
from dramatiq.common import compute_backoff
from dramatiq.errors import ConnectionClosed
from dramatiq.middleware import Middleware

#: the longest an idle consumer sleeps between two fetches, in milliseconds
IDLE_POLL_MS = 1000


class _WakingConsumer(_RedisConsumer):
    """Dramatiq's Redis consumer with an interruptible, longer idle sleep (see the module docstring)."""

    def __init__(self, broker: WakingRedisBroker, queue_name: str, prefetch: int, timeout: int):
        # (Dramatiq's Redis consumer, its errors and its broker's constructor are unannotated: their calls are
        # ignored for no-untyped-call)
        super().__init__(broker, queue_name, prefetch, timeout)  # type: ignore[no-untyped-call]
        self._waking = broker
        self._woken = threading.Event()
        #: the last look did not fetch: as many messages as the prefetch allows were outstanding
        self.full = False

    def wake(self) -> None:
        self.misses = 0  # the next sleep, if this look finds nothing, is the shortest again
        self._woken.set()

    def __next__(self) -> MessageProxy | None:
        if not self.message_cache:
            room = self.prefetch - self.outstanding_message_count
            self.full = room <= 0
            if room > 0:
                try:
                    self.message_cache = self.broker.do_fetch(self.queue_name, room)
                except redis.ConnectionError as exc:  # as Dramatiq's own: the consumer thread reconnects
                    raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]
        if self.message_cache:
            got: MessageProxy | None = super().__next__()  # type: ignore[no-untyped-call]
            return got  # Dramatiq's own: takes the first cached message
        cap = self.timeout if self._waking.stopping else max(self.timeout, self._waking.idle_poll_ms)
        self.misses, backoff_ms = compute_backoff(self.misses, max_backoff=cap)
        self._woken.wait(backoff_ms / 1000)
        self._woken.clear()
        return None


class _Wake(Middleware):
    """Wakes this process's consumer of a queue whose prefetch was full when one of its messages is
    acknowledged or rejected here, and every consumer when the worker begins to stop (whose sleeps are
    short again until a worker boots)."""

    def after_ack(self, broker: Any, message: Any) -> None:
        broker.wake(message.queue_name, full_only=True)

    def after_nack(self, broker: Any, message: Any) -> None:
        broker.wake(message.queue_name, full_only=True)

    def before_worker_boot(self, broker: Any, worker: Any) -> None:
        broker.stopping = False

    def before_worker_shutdown(self, broker: Any, worker: Any) -> None:
        broker.stopping = True
        broker.wake()


class WakingRedisBroker(RedisBroker):
    """Dramatiq's ``RedisBroker`` whose consumers sleep up to ``idle_poll_ms`` while idle and wake when this
    process sends to their queue or frees a worker thread (module docstring)."""

    def __init__(self, *args: Any, idle_poll_ms: int = IDLE_POLL_MS, **kwargs: Any):
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self.idle_poll_ms = idle_poll_ms
        self.stopping = False
        self._consumers: dict[str, _WakingConsumer] = {}
        self.add_middleware(_Wake())

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000) -> _WakingConsumer:
        consumer = self._consumers[queue_name] = _WakingConsumer(self, queue_name, prefetch, timeout)
        return consumer

    def enqueue(self, message: Any, *, delay: int | None = None) -> Any:
        sent = super().enqueue(message, delay=delay)
        if delay is None:
            self.wake(message.queue_name)
        return sent

    def wake(self, queue_name: str | None = None, *, full_only: bool = False) -> None:
        """End the idle sleep of this process's consumer of ``queue_name`` (None: of every queue);
        ``full_only``: only if its last look could not fetch because its prefetch was full (a message it
        finished frees room; a consumer that found its queue empty has no reason to look again sooner)."""
        if queue_name is None:
            for each in list(self._consumers.values()):
                each.wake()
            return
        consumer = self._consumers.get(queue_name)
        if consumer is not None and (consumer.full or not full_only):
            consumer.wake()
