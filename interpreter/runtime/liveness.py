"""What keeps a long-lived worker going: a broker that comes and goes, wake-ups, heartbeats.

:class:`BrokerWatch` pings the broker now and then. While it is unreachable the worker says so once and
keeps serving what it can (its store rounds) instead of exiting; when the broker is back, or was
restarted (a Redis without persistence loses the messages it held), every outbox row that was sent but
never claimed is made due again (:meth:`Store.reset_dispatch`), so those runs move within a second
instead of after ``redeliver_after``. A duplicate message is harmless: the claim refuses it.

:func:`wait_for_work` waits for the next round on the store's wake-ups when it has them (PostgreSQL:
LISTEN/NOTIFY on new outbox rows), else sleeps the interval. :class:`Heartbeat` records that this
process is alive on a store that keeps heartbeats, so other machines' workers can take over its leases
when it goes silent (:func:`sealflow.engine.recovery.expire_dead_owners`), and, on a Redis broker,
put back on their queues the messages it had fetched but not acknowledged (:func:`requeue_silent`: its beats
carry its Dramatiq broker id), instead of leaving them to Dramatiq's own minute-long heartbeat; every runtime that
executes steps beats, on its own thread (:class:`Heartbeats`), from before its first claim: a process
that claimed work without a heartbeat (`sealflow run` or `approve` driving a run on a shared store, or a
worker whose loop had not beaten yet) would look dead to the others, which would take its running steps.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from sealflow.core.errors import SealflowError
from sealflow.store.capabilities import Heartbeats as StoreHeartbeats
from sealflow.store.capabilities import WorkNotification
from sealflow.store.errors import StoreError

log = logging.getLogger("sealflow.liveness")


class BrokerUnavailable(SealflowError):
    """Sending a step message to the broker failed (it is down, restarting, or refused the connection); the
    message's outbox row stays in the store and is sent again once the broker answers."""


def backoff_delays(first: float = 0.5, factor: float = 2.0, most: float = 30.0) -> Iterator[float]:
    """0.5, 1, 2, 4 ... seconds, never more than ``most``: how long to wait between tries."""
    delay = first
    while True:
        yield delay
        delay = min(delay * factor, most)


def broker_identity(broker: Any) -> str | None:
    """The broker server's identity (new after every restart), or None if unreachable
    (:func:`sealflow.runtime.brokers.identity`: Redis, RabbitMQ, the embedded stub)."""
    from sealflow.runtime.brokers import identity

    return identity(broker)


class BrokerWatch:
    """Notices a broker that went away, came back, or restarted; on its return makes sent work due again."""

    def __init__(self, broker: Any, store: Any, *, every: float = 1.0, shown: str = "the broker"):
        self.broker, self.store, self.every, self.shown = broker, store, every, shown
        self.identity = broker_identity(broker)
        self.down_since: float | None = None if self.identity is not None else time.monotonic()
        self._next = time.monotonic() + every
        self._delays = backoff_delays(every, 2.0, 30.0)
        if self.down_since is not None:  # lost between the start-up check and now
            log.warning("lost the broker at %s; steps wait, runs stay queued; retrying (next try in %.1f s)",
                        self.shown, every)

    def lost(self, exc: BaseException) -> None:
        """A send failed (:class:`BrokerUnavailable`): the broker is down since now, whatever the last look
        said, so the next look that finds it answering sends again what was taken but never delivered."""
        if self.down_since is None:
            self.down_since = time.monotonic()
            self._next = self.down_since + self.every
            log.warning("lost the broker at %s (%s); steps wait, runs stay queued; retrying (next try in %.1f s)",
                        self.shown, exc, self.every)

    def check(self) -> bool:
        """Look at the broker if it is time; True while it is reachable."""
        now = time.monotonic()
        if now < self._next:
            return self.down_since is None
        got = broker_identity(self.broker)
        if got is None:
            delay = next(self._delays)
            if self.down_since is None:
                self.down_since = now
                log.warning("lost the broker at %s; steps wait, runs stay queued; retrying (next try in %.1f s)",
                            self.shown, delay)
            else:
                log.warning("the broker at %s is still unreachable after %.0f s; retrying in %.1f s", self.shown,
                            now - self.down_since, delay)
            self._next = now + delay
            return False
        self._next = now + self.every
        if self.down_since is not None or got != self.identity:
            why = "is back" if self.down_since is not None else "was restarted"
            again = self.store.reset_dispatch()
            log.warning("the broker at %s %s; sending again the %d message(s) sent but never claimed", self.shown,
                        why, again)
            self.down_since = None
            self._delays = backoff_delays(self.every, 2.0, 30.0)
        self.identity = got
        return True


class Outage:
    """A failure a loop meets at every round, said once when it begins (at ``level``) and once when it is
    over (at ``over_level``), on ``logger``."""

    def __init__(self, over: str, *, logger: logging.Logger = log, level: int = logging.WARNING,
                 over_level: int = logging.INFO):
        self._over, self.on = over, False
        self._log, self._level, self._over_level = logger, level, over_level

    def failed(self, message: str, *args: Any) -> None:
        if not self.on:
            self._log.log(self._level, message, *args)
        self.on = True

    def ok(self) -> None:
        if self.on:
            self._log.log(self._over_level, self._over)
        self.on = False


def wait_for_work(wakeups: WorkNotification | None, stop: threading.Event, interval: float,
                  outage: Outage | None = None) -> None:
    """Until new work is written (on a store with wake-ups: its ``WorkNotification`` capability, else None) or
    ``interval`` s pass, or ``stop`` is set. A store whose wake-ups fail (its database away) is polled instead,
    said once per ``outage`` (the caller's loop)."""
    if wakeups is None:
        stop.wait(interval)
        return
    outage = outage or Outage("the store's wake-ups work again")
    try:
        wakeups.wait_for_work(interval)
    except StoreError as exc:  # the database went away: say so (it names the store and the cause), poll
        outage.failed("waiting for the store's wake-ups failed (%s); polling until they work again", exc)
        stop.wait(interval)
    except Exception:  # noqa: BLE001 - the listener failed otherwise: fall back to polling this round
        log.warning("waiting for the store's wake-ups failed; polling", exc_info=True)
        stop.wait(interval)
    else:
        outage.ok()


class Heartbeat:
    """Beats every ``every`` seconds on a store that keeps heartbeats (``store``: its ``Heartbeats``
    capability; None: it keeps none, nothing is sent), with the worker's Dramatiq ``broker_id`` (Redis) when it
    has one."""

    def __init__(self, store: StoreHeartbeats | None, owner: str, *, every: float = 2.0,
                 broker_id: str | None = None):
        self.store, self.owner, self.every, self.broker_id = store, owner, every, broker_id
        self.enabled = store is not None
        self._next = 0.0

    def send(self) -> None:
        if self.store is None:  # a store that keeps no heartbeats
            return
        if self.broker_id is None:
            self.store.heartbeat(self.owner)
        else:
            self.store.heartbeat(self.owner, self.broker_id)

    def beat(self) -> None:
        if not self.enabled or time.monotonic() < self._next:
            return
        self.send()
        self._next = time.monotonic() + self.every


class Heartbeats(threading.Thread):
    """Beats for ``owner`` every ``every`` seconds on its own thread until :meth:`stop`; the first beat is
    synchronous, in :meth:`begin`, so no step is claimed before this process is known to be alive. A beat that
    fails (the store unreachable) is logged and tried again at the next tick: going silent is exactly what
    lets other workers take over, so a process cut off from the store does not pretend otherwise."""

    def __init__(self, store: StoreHeartbeats | None, owner: str, *, every: float = 2.0,
                 broker_id: str | None = None):
        super().__init__(name="sealflow-heartbeat", daemon=True)
        self.beats = Heartbeat(store, owner, every=every, broker_id=broker_id)
        self._halt = threading.Event()
        self._outage = Outage("this worker's heartbeat is recorded in the store again")

    def begin(self) -> None:
        if not self.beats.enabled:
            return
        self._beat()
        self.start()

    def _beat(self) -> None:
        try:
            self.beats.send()
        except StoreError as exc:  # the store is away: say so once (it names the store and the cause), beat again
            self._outage.failed("could not record this worker's heartbeat in the store (%s); trying at every beat",
                                exc)
        except Exception:  # noqa: BLE001 - something else: the same, with where it came from
            log.warning("could not record this worker's heartbeat in the store; trying again", exc_info=True)
        else:
            self._outage.ok()

    def run(self) -> None:
        while not self._halt.wait(self.beats.every):
            self._beat()

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(5)


#: put back on their queues the messages a (dead) Dramatiq Redis consumer fetched but never acknowledged, as
#: Dramatiq's own maintenance does for a worker whose Redis heartbeat is a minute old; returns how many
_REQUEUE = """
local ns, dead = KEYS[1], ARGV[1]
local acks = ns .. ":__acks__." .. dead .. "."
local moved = 0
for _, set in ipairs(redis.call("keys", acks .. "*")) do
  local queue = ns .. ":" .. string.sub(set, #acks + 1)
  for _, id in ipairs(redis.call("smembers", set)) do
    if redis.call("hexists", queue .. ".msgs", id) == 1 then
      redis.call("rpush", queue, id)
      moved = moved + 1
    end
  end
  redis.call("del", set)
end
redis.call("zrem", ns .. ":__heartbeats__", dead)
return moved
"""


def broker_id_of(broker: Any) -> str | None:
    """The Dramatiq broker id of a Redis broker (the key of its unacknowledged messages), else None."""
    return getattr(broker, "broker_id", None) if getattr(broker, "client", None) is not None else None


def requeue_silent(store: StoreHeartbeats | None, broker: Any, silent_for: float | None) -> int:
    """Requeue the fetched but unacknowledged Redis messages of every other worker whose store heartbeat is
    more than ``silent_for`` s old (``store``: its ``Heartbeats`` capability, ``silent_brokers``; None: the
    store keeps no heartbeats); how many.

    A worker killed with messages in its prefetch buffer would otherwise leave them for a minute (Dramatiq's
    heartbeat) or ``redeliver_after`` (the sweeper). A worker that was only slow to beat and is alive gets a
    duplicate of what it holds, which is harmless: the claim refuses a step already taken."""
    own = broker_id_of(broker)
    if store is None or own is None or silent_for is None:
        return 0
    moved = 0
    for owner, broker_id in store.silent_brokers(silent_for):
        if broker_id == own:
            continue
        count = int(broker.client.eval(_REQUEUE, 1, broker.namespace, broker_id))
        store.forget_broker(owner, broker_id)
        if count:
            log.warning("worker %s went silent holding %d fetched message(s) it never started; requeued them",
                        owner, count)
        moved += count
    return moved
