"""The Dramatiq side: the step actor, the embedded broker, and the Redis broker of ``sealflow worker``.

There is one step actor per run priority, each on its own queue
(:mod:`sealflow.runtime.priority`). The actor receives ids only,
``(run_id, step_id, attempt, token, tenant)``, hands them to the engine (which checks them
against the store), and enqueues the messages the engine's commit made due. Retries are the interpreter's, never
Dramatiq's: the actor has ``max_retries=0`` and never raises into Dramatiq (a
failure is recorded in the store, or, if the store itself failed, left for
the sweeper to redo once the lease expires). Long waits are timers in the
store; nothing is sent with a Dramatiq ``delay``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import dramatiq
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import Retries

from sealflow.runtime.priority import ACTOR_PRIORITY, PRIORITIES, actor_name_for, queue_for
from sealflow.store.errors import StoreError
from sealflow.store.records import Message

if TYPE_CHECKING:
    from sealflow.engine.engine import Engine
    from sealflow.store.records import Claimed

log = logging.getLogger("sealflow.actors")

ACTOR_NAME = "sealflow_step"
#: how many of a run's consecutive steps one message may carry on in its worker thread before the rest
#: goes back through the broker (so one long run cannot hold a worker thread from the others for long)
CONTINUE_LIMIT = 16
QUEUE = "sealflow"
#: the longest run or step id a step message may carry (ids are far shorter; a fan-out child's grows with each
#: level of nesting): a longer one is refused unread, as is anything else that is not a step message's shape
MAX_ID_CHARS = 4096


#: a step message's ``(run_id, step_id, attempt)``
Ids = tuple[str, str, int]


class CarryWatch(Protocol):
    """Told what a step message's thread does (the worker's step log: cli/commands/worker.py), explicitly."""

    def carried(self, first: Ids, now: Ids) -> None:
        """The message ``first`` has carried its run on to step ``now`` (a later step of the same run)."""

    def ended(self, first: Ids, state: str | None) -> None:
        """The message ``first`` is done; ``state``: the one its last commit left the run in (None: none)."""


class MalformedMessage(ValueError):
    """A message on a step queue whose arguments are not ``(run_id, step_id, attempt, token[, tenant])`` of
    the right types: forged, corrupt, or sent by something else. It is refused before anything reads it."""


def step_message(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Message:
    """A step message's arguments as a :class:`Message`; :class:`MalformedMessage` saying what is wrong."""
    if kwargs.keys() - {"tenant"} or len(args) not in (4, 5) or len(args) == 5 and kwargs:
        raise MalformedMessage(f"{len(args)} arguments and keywords {sorted(kwargs)}, not (run_id, step_id, "
                               "attempt, token[, tenant])")
    run_id, step_id, attempt, token, *rest = args
    tenant = rest[0] if rest else kwargs.get("tenant")
    for name, value in (("run_id", run_id), ("step_id", step_id)):
        if type(value) is not str or not 0 < len(value) <= MAX_ID_CHARS:
            raise MalformedMessage(f"{name} is {_kind(value)}, not an id (text of 1 to {MAX_ID_CHARS} characters)")
    for name, value in (("attempt", attempt), ("token", token)):
        if type(value) is not int:
            raise MalformedMessage(f"{name} is {_kind(value)}, not a whole number")
    if attempt < 1:
        raise MalformedMessage(f"attempt is {attempt}; attempts count from 1")
    if tenant is not None and (type(tenant) is not str or len(tenant) > MAX_ID_CHARS):
        raise MalformedMessage(f"tenant is {_kind(tenant)}, not a tenant's name")
    return Message(run_id, step_id, attempt, token, tenant)


def _kind(value: object) -> str:
    if isinstance(value, str):
        return "empty text" if not value else f"text of {len(value)} characters" if len(value) > 40 else repr(value)
    return f"{type(value).__name__} {_brief(value)}" if value is not None else "null"


def _brief(value: object) -> str:
    import reprlib

    brief = reprlib.Repr()
    brief.maxstring, brief.maxother, brief.maxlist, brief.maxdict, brief.maxlevel = 40, 40, 6, 6, 2
    return brief.repr(value)


def embedded_broker() -> StubBroker:
    """The in-process broker of the embedded default: no middleware but ``Retries`` pinned to zero
    (kept so ``max_retries`` is a valid actor option on every broker, including Redis)."""
    return StubBroker(middleware=[Retries(max_retries=0)])


def redis_broker(url: str = "redis://127.0.0.1:6379/0", *, namespace: str = "dramatiq",
                 waking: bool = True) -> dramatiq.Broker:
    """A Dramatiq Redis broker on ``url`` for ``sealflow worker`` processes, with the same middleware
    as :func:`embedded_broker`: ``Retries`` pinned to zero and nothing else (no ``TimeLimit``: the
    engine times attempts out itself; no ``AgeLimit``, ``Callbacks`` or ``Pipelines``: the store decides
    what is due). ``waking`` (the default): a
    :class:`~sealflow.runtime.redispoll.WakingRedisBroker`, whose idle consumers poll Redis
    slowly and wake when this process sends or finishes work; else Dramatiq's own ``RedisBroker`` (the
    benchmarks' bare chain). Raises ``ValueError`` for a URL that is not ``redis://``, ``rediss://`` or
    ``unix://``; connecting is lazy (``broker.client.ping()`` checks it)."""
    from urllib.parse import parse_qsl, urlsplit

    from dramatiq.brokers.redis import RedisBroker

    from sealflow.runtime.redispoll import WakingRedisBroker

    scheme = urlsplit(url).scheme
    if scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"{url!r} is not a Redis URL; use redis://HOST:PORT/DB (rediss:// for TLS, "
                         "unix:///path/to/redis.sock)")
    parts = urlsplit(url)
    if scheme != "unix":  # redis-py reads a path that is not a number as database 0, in silence
        db = parts.path.strip("/")
        query_db = [v for k, v in parse_qsl(parts.query) if k == "db"]
        if (db and not db.isdigit()) or any(not v.isdigit() for v in query_db):
            said = db if db and not db.isdigit() else query_db[0]
            raise ValueError(f"the Redis database {said!r} is not a number; use redis://HOST:PORT/DB with DB a "
                             "database number (0 to 15 on a default Redis)")
    kind = WakingRedisBroker if waking else RedisBroker
    broker = kind(url=url, namespace=namespace, middleware=[Retries(max_retries=0)])
    # fail in seconds, not minutes, when the host does not answer; keep idle connections alive
    broker.client.connection_pool.connection_kwargs.setdefault("socket_connect_timeout", 5.0)
    broker.client.connection_pool.connection_kwargs.setdefault("socket_keepalive", True)
    return broker


def carry(engine: Engine, message: Message, send: Callable[[Message], None], route: Callable[[Message], None] | None,
          limit: int = CONTINUE_LIMIT, *, claimed: Claimed | None = None,
          watch: CarryWatch | None = None) -> str | None:
    """Handle ``message`` and carry its run on, in this thread, for up to ``limit`` consecutive steps: each step
    the run makes due next, alone, is claimed by the commit that made it due (the engine's ``carry``) and
    handled here; what else becomes due is sent (``send``: its run's own next step; ``route``: another run's,
    to its priority's queue; None: ``send``), as is the step after the last. ``claimed``: the message's attempt,
    claimed already (a run's first, in its submit: runtime/inline.py). ``watch``: told each step the message
    carries its run on to, and the run's state at the end. Returns the state the last commit left the run in
    (None: nothing was committed). Never raises: a failure is logged, the store keeps the run, and the step's
    lease ends and it is retried."""
    run_id = message.run_id
    first: Ids = (message.run_id, message.step_id, message.attempt)
    state: str | None = None
    try:
        for i in range(limit):
            try:  # carry: the commit claims the run's one next step for this thread (but the last time round)
                got = engine.handle(*message, carry=i + 1 < limit, claimed=claimed)
            except StoreError as exc:  # the store's own clear error (away, disk full): one line, no traceback
                log.error("step message (%s, %s, %s) failed: %s; its lease will expire and it will be retried",
                          message.run_id, message.step_id, message.attempt, exc)
                return state
            except Exception:  # noqa: BLE001 - the store is the truth; the sweeper redoes what failed here
                log.exception("step message (%s, %s, %s) failed; its lease will expire and it will be retried",
                              message.run_id, message.step_id, message.attempt)
                return state
            state = got.run_state or state
            due, claimed = got.messages, got.claimed
            # the run's one next step, due now: take it in this thread instead of a round trip through the
            # broker. Nothing is skipped: it is claimed (by the commit that made it due, when the engine could),
            # fenced and committed like any message; should this process die first, its outbox row is resent
            # (not claimed yet) or its lease ends (claimed) and it is retried.
            if len(due) == 1 and due[0].run_id == message.run_id:
                message = due[0]
                if watch is not None:
                    watch.carried(first, (message.run_id, message.step_id, message.attempt))
                # (DEBUG: a line per step would cost more than the step; the message's own lines are INFO)
                log.debug("run %s: step %s attempt %s: carried on in this thread", message.run_id, message.step_id,
                          message.attempt)
                continue
            if claimed is not None:
                att = claimed.attempt
                log.warning("a carried-on claim of run %s step %r was not handled next; its lease will expire and "
                            "it will be retried", claimed.run.id, att.step_id)
            for m in due:
                if m.run_id == run_id or route is None:
                    send(m)
                else:
                    route(m)
            return state
        send(message)
        return state
    finally:
        if watch is not None:
            watch.ended(first, state)


def declare_step_actor(broker: dramatiq.Broker, engine: Engine, *, queue_name: str = QUEUE,
                       priority: str = "normal", route: Callable[[Message], None] | None = None,
                       watch: CarryWatch | None = None) -> dramatiq.Actor[..., None]:
    """Declare the step actor of ``priority`` on ``broker`` (one per broker and priority) bound to ``engine``,
    on the priority's queue (:mod:`sealflow.runtime.priority`). ``route`` sends a due message of
    another run to its own priority's actor (None: this actor).

    On every broker a message carries its run on for up to :data:`CONTINUE_LIMIT` consecutive steps in the
    same worker thread (a run's steps are sequential: another worker could not take the next one sooner),
    then sends the rest through the broker so that one long run does not hold a thread from the others.
    The carried-on step's outbox row is written sent, as for a message handed to the broker: if this
    process dies before claiming it, the sweeper sends it again after ``redeliver_after``. ``watch``: see
    :func:`carry` (the worker's step log, which names the step a message carried its run on to and the state it
    left the run in).
    """
    limit = CONTINUE_LIMIT

    def sealflow_step(*args: Any, **kwargs: Any) -> None:  # (run_id, step_id, attempt, token, tenant): checked first
        try:
            message = step_message(args, kwargs)
        except MalformedMessage as exc:  # acknowledged and dropped: no step is named, nothing to run or retry
            log.warning("refused a malformed step message %s: %s; nothing was read or run", _brief(args), exc)
            engine.claim_refused("malformed")
            return
        carry(engine, message, send, route, limit, watch=watch)

    def send(m: Message) -> None:
        step_actor.send(*m)

    step_actor = dramatiq.actor(broker=broker, actor_name=actor_name_for(ACTOR_NAME, priority),
                                queue_name=queue_for(queue_name, priority), max_retries=0,
                                priority=ACTOR_PRIORITY[priority])(sealflow_step)
    return step_actor


def declare_step_actors(broker: dramatiq.Broker, engine: Engine, *, queue_name: str = QUEUE,
                        route: Callable[[Message], None] | None = None,
                        watch: CarryWatch | None = None) -> dict[str, dramatiq.Actor[..., None]]:
    """One step actor per run priority (``critical`` ... ``low``), each on its own queue."""
    return {p: declare_step_actor(broker, engine, queue_name=queue_name, priority=p, route=route, watch=watch)
            for p in PRIORITIES}
