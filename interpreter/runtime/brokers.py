"""The broker of ``sealflow worker``, from its URL: Redis or RabbitMQ.

The broker carries only "this step is due"; the store is the truth (a lost message is sent again from the
store's outbox, a duplicate is refused by the claim). Both brokers get the same middleware as the embedded
one: ``Retries`` pinned to zero and nothing else (the interpreter retries; no ``TimeLimit``, ``AgeLimit``,
``Callbacks`` or ``Pipelines``).

* ``redis://``, ``rediss://``, ``unix://``: Dramatiq's ``RedisBroker``
  (:func:`sealflow.runtime.actors.redis_broker`).
* ``amqp://``, ``amqps://``: Dramatiq's ``RabbitmqBroker`` with **publisher confirms**
  (``confirm_delivery=True``): a send returns only once RabbitMQ has taken the message (persistent, on a
  durable queue), and a message RabbitMQ could not route (its queue deleted meanwhile) is refused and sent
  again after the queue is declared again, instead of being dropped in silence; a broker that does not
  answer makes the send raise. Run priority needs no RabbitMQ priority queue: each Sealflow priority has its
  own queue (:mod:`sealflow.runtime.priority`), so every message of one queue has the same
  priority and an ``x-max-priority`` argument would order nothing (and would fix the queue's arguments for
  ever: a later change is a ``PRECONDITION_FAILED`` at declare).

:func:`ping` and :func:`identity` let a worker wait for its broker and notice that it went away, came back
or restarted (:mod:`sealflow.runtime.liveness`), whichever broker it is.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any
from urllib.parse import parse_qs, urlsplit

import dramatiq
from dramatiq.middleware import Retries

REDIS_SCHEMES = ("redis", "rediss", "unix")
RABBITMQ_SCHEMES = ("amqp", "amqps")
#: how long a connection RabbitMQ blocks (a memory or disk alarm) may stay blocked before a send fails
BLOCKED_TIMEOUT = 60.0
_PING = "_sealflow_ping"
_DEPTH = "_sealflow_depth"
_depth_lock = threading.Lock()
_generations = itertools.count(1)


def broker_from_url(url: str, *, namespace: str = "dramatiq") -> dramatiq.Broker:
    """The broker ``url`` names (connecting is lazy: :func:`ping` checks it). Raises ``ValueError``, in one
    sentence that does not repeat the URL (it may hold a password), for a scheme that is no broker's, a URL
    its client cannot parse, or a RabbitMQ URL without the ``pika`` package installed."""
    scheme = urlsplit(url).scheme
    if scheme in REDIS_SCHEMES:
        from sealflow.runtime.actors import redis_broker

        return redis_broker(url, namespace=namespace)
    if scheme in RABBITMQ_SCHEMES:
        return rabbitmq_broker(url)
    said = f"the scheme {scheme + '://'!r}" if scheme and "://" in url else "a URL without a scheme"
    raise ValueError(f"{said} is not a broker's; use redis://HOST:PORT/DB (rediss:// for TLS, unix:///path) for "
                     "Redis or amqp://USER:PASSWORD@HOST:5672/VHOST (amqps:// for TLS) for RabbitMQ")


def rabbitmq_broker(url: str = "amqp://guest:guest@127.0.0.1:5672/%2F") -> dramatiq.Broker:
    """A Dramatiq ``RabbitmqBroker`` on ``url`` with publisher confirms on and ``Retries`` pinned to zero.
    A connection RabbitMQ blocks (resource alarm) fails a send after :data:`BLOCKED_TIMEOUT` seconds unless
    the URL sets ``blocked_connection_timeout``. Raises ``ValueError`` for a URL pika cannot parse."""
    if urlsplit(url).scheme not in RABBITMQ_SCHEMES:
        raise ValueError("a RabbitMQ URL starts with amqp:// (amqps:// for TLS), like "
                         "amqp://USER:PASSWORD@HOST:5672/VHOST")
    try:
        from dramatiq.brokers.rabbitmq import RabbitmqBroker
    except ImportError:
        raise ValueError("a RabbitMQ broker needs the pika package: pip install pika (from a clone: "
                         "pip install -e '.[rabbitmq]')") from None
    try:
        broker = RabbitmqBroker(url=url, confirm_delivery=True, middleware=[Retries(max_retries=0)])
    except ValueError as exc:
        raise ValueError(f"{exc}; a RabbitMQ URL reads amqp://USER:PASSWORD@HOST:5672/VHOST") from None
    # one URL, or several separated by ";" (hosts tried in turn: Dramatiq keeps a list of their parameters)
    held = broker.parameters
    for parameters, one in zip(held if isinstance(held, list) else [held], url.split(";"), strict=True):
        if "blocked_connection_timeout" not in parse_qs(urlsplit(one).query):
            parameters.blocked_connection_timeout = BLOCKED_TIMEOUT
    return broker


def is_rabbitmq(broker: Any) -> bool:
    return type(broker).__name__ == "RabbitmqBroker"


def ping(broker: Any) -> None:
    """Return if ``broker`` answers, else raise (the client's own exception; ``ValueError`` for a URL the
    client parses only when it connects)."""
    if is_rabbitmq(broker):
        _ping_connection(broker)
    else:
        broker.client.ping()


def identity(broker: Any) -> str | None:
    """The broker server's identity, new after every restart, or None if unreachable: Redis's ``run_id``;
    for RabbitMQ the generation of this process's ping connection (a restart closes every connection, so the
    next look opens a new one); ``"local"`` for the embedded stub, which is always there."""
    if is_rabbitmq(broker):
        try:
            return _ping_connection(broker)
        except Exception:  # noqa: BLE001 - pika raises several kinds: all mean "not there now"
            return None
    client = getattr(broker, "client", None)
    if client is None:
        return "local"
    try:
        return str(client.info("server").get("run_id") or "redis")
    except Exception:  # noqa: BLE001 - redis-py raises several kinds: all mean "not there now"
        return None


def describe(exc: BaseException) -> str:
    """A client's connection error in a few words: its first line, else what it wraps (pika's
    ``AMQPConnectionError`` has no text of its own), else its type."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    if not text and exc.args:
        text = "; ".join(str(a) for a in exc.args)
    return text or type(exc).__name__


def _ping_connection(broker: Any) -> str:
    """Keep one connection to RabbitMQ for looking at it (used by one thread: the worker's serve loop) and
    return its generation; a connection found closed is replaced by a new one of a new generation."""
    import pika

    held = getattr(broker, _PING, None)
    if held is not None:
        generation, conn = held
        try:
            if conn.is_open:
                conn.process_data_events(time_limit=0)  # heartbeats, and notice a connection the server closed
                return f"amqp#{generation}"
        except pika.exceptions.AMQPError:
            pass
        _drop_ping(broker)
    conn = pika.BlockingConnection(parameters=broker.parameters)
    generation = next(_generations)
    setattr(broker, _PING, (generation, conn))
    broker.connections.add(conn)  # closed with the broker
    return f"amqp#{generation}"


def _drop_ping(broker: Any) -> None:
    held = getattr(broker, _PING, None)
    if held is None:
        return
    setattr(broker, _PING, None)
    broker.connections.discard(held[1])
    try:
        if held[1].is_open:
            held[1].close()
    except Exception:  # noqa: BLE001 - a dead connection may refuse to close; it is dropped either way
        pass


def queue_depth(broker: Any, queue: str) -> int:
    """Messages ready on RabbitMQ ``queue`` (0 if it does not exist yet), read with a passive declare on one
    connection kept for it (a scrape may come on any thread: a thread's own connection would outlive it)."""
    import pika

    with _depth_lock:
        conn = getattr(broker, _DEPTH, None)
        try:
            if conn is None or not conn.is_open:
                conn = pika.BlockingConnection(parameters=broker.parameters)
                setattr(broker, _DEPTH, conn)
                broker.connections.add(conn)  # closed with the broker
            channel = conn.channel()
            try:
                return int(channel.queue_declare(queue=queue, passive=True).method.message_count)
            except pika.exceptions.ChannelClosedByBroker as exc:
                if exc.reply_code == 404:
                    return 0
                raise
            finally:
                if channel.is_open:
                    channel.close()
        except pika.exceptions.AMQPConnectionError:
            if conn is not None:
                broker.connections.discard(conn)
            setattr(broker, _DEPTH, None)
            raise
