"""Redis consumers that poll slowly while idle and wake when this process sends or frees work
(interpreter/runtime/redispoll.py), on the local Redis.

Each consumer here is Dramatiq's own fetch on a queue of a namespace of its own; its sleeps are recorded
instead of slept (``_woken.wait`` replaced), so what is checked is how long it would sleep, never a time.
"""

from __future__ import annotations

import threading
import time
import uuid

import dramatiq
import pytest
from worker_helpers import REDIS, redis_or_skip

from sealflow.runtime.actors import redis_broker
from sealflow.runtime.redispoll import IDLE_POLL_MS, WakingRedisBroker


@pytest.fixture
def broker():
    client = redis_or_skip()
    ns = "wake_" + uuid.uuid4().hex[:10]
    b = redis_broker(REDIS, namespace=ns)
    yield b
    b.close()
    for key in client.scan_iter(f"{ns}*"):
        client.delete(key)


class _Sleeps:
    """Stands for a consumer's ``_woken`` event: records each sleep asked for (seconds) and returns at once."""

    def __init__(self, real: threading.Event):
        self.real, self.asked = real, []

    def wait(self, timeout: float) -> bool:
        self.asked.append(timeout)
        return self.real.is_set()

    def set(self) -> None:
        self.real.set()

    def clear(self) -> None:
        self.real.clear()

    def is_set(self) -> bool:
        return self.real.is_set()


def _recorded(consumer) -> _Sleeps:
    sleeps = _Sleeps(consumer._woken)
    consumer._woken = sleeps
    return sleeps


def _message(broker, queue: str, n: int = 1):
    name = f"poll_probe_{queue}"
    if name in broker.actors:
        return broker.actors[name].message(n)

    @dramatiq.actor(broker=broker, queue_name=queue, actor_name=name)
    def probe(n):
        return None

    return probe.message(n)


def _woken_then_takes(consumer, sleeps: _Sleeps, n: int) -> None:
    """The consumer's sleep was cut short and its backoff starts again; its next look takes message ``n``."""
    assert sleeps.is_set() and consumer.misses == 0
    got = next(consumer)
    assert got is not None and got.args == (n,)
    consumer.ack(got)


def test_given_a_worker_broker_then_it_is_the_waking_one_and_the_benchmark_peer_can_have_dramatiqs_own():
    # Given/When the broker of `sealflow worker` and the bare one the benchmarks' peer asks for
    ours, bare = redis_broker(REDIS), redis_broker(REDIS, waking=False)
    # Then ours wakes its consumers and the peer's is Dramatiq's own RedisBroker, both with Retries pinned to 0
    assert isinstance(ours, WakingRedisBroker) and not isinstance(bare, WakingRedisBroker)
    assert type(bare).__name__ == "RedisBroker"
    for b in (ours, bare):
        assert [type(m).__name__ for m in b.middleware if type(m).__name__ == "Retries"] == ["Retries"]


def test_given_an_idle_queue_when_it_stays_empty_then_its_sleeps_grow_past_the_worker_timeout_to_the_idle_cap(
        broker):
    # Given a consumer with a worker timeout of 100 ms on an empty queue
    broker.declare_queue("q")
    consumer = broker.consume("q", prefetch=4, timeout=100)
    sleeps = _recorded(consumer)
    # When it finds nothing thirty times over
    for _ in range(30):
        assert next(consumer) is None
    # Then it sleeps longer each time, past the worker timeout, but never longer than the idle cap
    assert max(sleeps.asked) > 0.1
    assert max(sleeps.asked) <= IDLE_POLL_MS / 1000
    assert sleeps.asked[-1] >= IDLE_POLL_MS / 2000  # the cap's jitter keeps it within 50-100% of it


def test_given_an_idle_consumer_when_this_process_sends_to_its_queue_then_it_wakes_and_fetches_at_once(broker):
    # Given a consumer that has been idle long enough to sleep up to the idle cap
    broker.declare_queue("q")
    consumer = broker.consume("q", prefetch=4, timeout=100)
    sleeps = _recorded(consumer)
    for _ in range(30):
        next(consumer)
    assert consumer.misses > 5
    # When this process sends a message to that queue
    broker.enqueue(_message(broker, "q"))
    # Then its sleep is cut short, its backoff starts again, and its next look takes the message
    _woken_then_takes(consumer, sleeps, 1)


def test_given_two_queues_when_one_is_sent_to_then_only_its_consumer_is_woken(broker):
    broker.declare_queue("a")
    broker.declare_queue("b")
    a, b = broker.consume("a", prefetch=4, timeout=100), broker.consume("b", prefetch=4, timeout=100)
    for c in (a, b):
        _recorded(c)
        for _ in range(10):
            next(c)
    # When a message goes to queue a
    broker.enqueue(_message(broker, "a"))
    # Then a is woken and b sleeps on
    assert a._woken.is_set() and not b._woken.is_set()
    assert b.misses > 5


def test_given_a_message_acknowledged_here_then_its_queues_consumer_wakes_to_fetch_again(broker):
    # Given a consumer whose prefetch is full (one message outstanding, prefetch 1) and which then slept
    broker.declare_queue("q")
    broker.enqueue(_message(broker, "q", 1))
    broker.enqueue(_message(broker, "q", 2))
    consumer = broker.consume("q", prefetch=1, timeout=100)
    sleeps = _recorded(consumer)
    first = next(consumer)
    assert first is not None
    for _ in range(10):
        assert next(consumer) is None  # full: it does not fetch, it sleeps
    consumer._woken.clear()
    # When a worker thread acknowledges the message (Dramatiq emits after_ack)
    broker.emit_before("ack", first)
    consumer.ack(first)
    broker.emit_after("ack", first)
    # Then the consumer is woken and fetches the second message on its next look
    _woken_then_takes(consumer, sleeps, 2)


def test_given_a_consumer_with_room_when_a_message_is_acknowledged_then_it_sleeps_on(broker):
    """Only a full consumer has a reason to look again when a message ends: one with room found its queue empty."""
    broker.declare_queue("q")
    broker.enqueue(_message(broker, "q", 1))
    consumer = broker.consume("q", prefetch=4, timeout=100)
    _recorded(consumer)
    first = next(consumer)
    for _ in range(10):
        assert next(consumer) is None  # room for three more, but the queue is empty
    consumer._woken.clear()
    # When the message is acknowledged here
    consumer.ack(first)
    broker.emit_after("ack", first)
    # Then the consumer is not woken: its backoff goes on
    assert not consumer._woken.is_set() and consumer.misses > 5


def test_given_a_worker_stopping_then_idle_sleeps_are_the_worker_timeout_again_until_a_worker_boots(broker):
    broker.declare_queue("q")
    consumer = broker.consume("q", prefetch=4, timeout=100)
    sleeps = _recorded(consumer)
    # When the worker begins to stop
    broker.emit_before("worker_shutdown", object())
    # Then every consumer is woken, and sleeps are capped at the worker timeout (the stop is not held up)
    assert sleeps.is_set()
    for _ in range(30):
        next(consumer)
    assert max(sleeps.asked) <= 0.1
    # and a worker booting again on the broker gets the idle cap back
    broker.emit_before("worker_boot", object())
    assert broker.stopping is False


def test_given_a_message_sent_by_another_process_when_the_queue_is_idle_here_then_it_is_still_fetched(broker):
    """No wake-up comes from elsewhere: the idle poll finds it (within IDLE_POLL_MS; here, the first look)."""
    # Given an idle consumer here
    broker.declare_queue("q")
    consumer = broker.consume("q", prefetch=4, timeout=100)
    for _ in range(3):
        assert next(consumer) is None
    # When another broker (another process) sends to the same queue
    other = redis_broker(REDIS, namespace=broker.namespace)
    other.declare_queue("q")
    other.enqueue(_message(other, "q", 7))
    other.close()
    # Then the consumer here fetches it when it next looks, not woken
    deadline = time.monotonic() + 10
    got = None
    while got is None:
        assert time.monotonic() < deadline, "the message sent elsewhere was never fetched"
        got = next(consumer)
    assert got.args == (7,)
    consumer.ack(got)


def test_given_redis_unreachable_when_a_consumer_looks_then_it_raises_dramatiqs_connection_error():
    """As Dramatiq's own consumer: its consumer thread then logs a connection error and reconnects (not an
    'unexpected error' with a traceback)."""
    from dramatiq.errors import ConnectionClosed

    # Given a waking broker on a port where nothing listens
    dead = redis_broker("redis://127.0.0.1:1/0", namespace="wake_dead")
    dead.declare_queue("q")
    consumer = dead.consume("q", prefetch=4, timeout=100)
    # When its consumer looks for messages, then it raises Dramatiq's ConnectionClosed
    with pytest.raises(ConnectionClosed):
        next(consumer)
