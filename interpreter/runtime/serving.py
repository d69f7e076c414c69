"""Serving: a long-lived worker process's loop (``sealflow worker``).

:meth:`Serving.serve` works, dispatches and sweeps until told to stop, ends the leases of dead workers,
keeps this process's heartbeat, prunes by the retention policy, and outlives a broker or store that goes
away for a while (:mod:`sealflow.runtime.liveness`). ``drive`` (one run, in this process) is
:mod:`sealflow.runtime.driving`'s.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from sealflow.engine import recovery
from sealflow.operations import notifications
from sealflow.policy import authz
from sealflow.runtime import liveness, takeover
from sealflow.runtime.liveness import BrokerUnavailable
from sealflow.store.errors import StoreError

if TYPE_CHECKING:
    import dramatiq

    from sealflow.core.clock import Clock
    from sealflow.engine.engine import Engine
    from sealflow.operations.notifications.config import NotifyConfig
    from sealflow.operations.retention import Retention
    from sealflow.policy.access import AccessProvider
    from sealflow.runtime.config import RuntimeConfig
    from sealflow.runtime.dispatcher import Dispatcher
    from sealflow.runtime.sweeper import Sweeper
    from sealflow.runtime.telemetry.hooks import Telemetry
    from sealflow.store.base import Store
    from sealflow.store.capabilities import Capabilities


class Serving:
    """Methods of :class:`~sealflow.runtime.facade.Runtime` (see its module); they use its store,
    broker, dispatcher, sweeper, configuration and clock."""

    if TYPE_CHECKING:  # the facade's (runtime/facade.py), which these methods use
        store: Store
        engine: Engine
        broker: dramatiq.Broker
        access: AccessProvider
        capabilities: Capabilities
        clock: Clock
        config: RuntimeConfig
        notify: NotifyConfig
        owner: str
        dispatcher: Dispatcher
        sweeper: Sweeper
        telemetry: Telemetry
        heartbeat_every: float
        _heartbeats: liveness.Heartbeats | None
        _recovered: bool
        _left_steps: takeover.LeftSteps | None

        def start(self) -> None: ...
        def recover(self, *, actor: str | None = None, tenant: str | None = None,
                    leave_unready: bool = False) -> dict[str, Any]: ...

    def serve(self, stop: threading.Event, *, interval: float = 0.2, allow_open: bool = False,
              dead_owner_check: float = 1.0, heartbeat_every: float = 2.0, dead_after: float = 15.0,
              broker_shown: str = "the broker", broker_lost: BrokerUnavailable | None = None) -> None:
        """Work, dispatch and sweep until ``stop`` is set (a long-lived worker process). Refuses to start
        in open development mode unless ``allow_open`` (see :func:`sealflow.policy.authz.require_policy`).

        Every round (``interval`` seconds, or sooner when the store wakes it: PostgreSQL LISTEN/NOTIFY):
        send the outbox (rows any process wrote, e.g. ``sealflow submit``); every ``interval`` seconds (not at
        each wake-up) sweep expired leases and due timers. Every ``dead_owner_check`` seconds end the leases
        of dead workers: on a store with heartbeats (PostgreSQL) those silent for ``dead_after`` seconds, on any
        machine (on Redis also requeue the messages they fetched but never acknowledged); else this host's, by
        pid. This worker beats every ``heartbeat_every`` seconds where the store keeps heartbeats. A broker
        that goes away (or fails a send) is retried with backoff and logged
        (:mod:`sealflow.runtime.liveness`); a round that fails (the store busy past its timeout, or
        unreachable) is logged and tried again, and so is the recovery of :meth:`start` if it failed
        (``broker_lost``: it failed sending, so what it took from the outbox is sent again once the broker is back)."""
        from sealflow.operations.retention import Retention

        retention = Retention.from_config(self.config.extra)
        if not allow_open:
            authz.require_policy(self.access, "a long-lived worker")
        self.heartbeat_every = heartbeat_every
        self.start()  # which starts this process's heartbeats
        if self._heartbeats is not None:  # (started before serve(), at the default pace)
            self._heartbeats.beats.every = heartbeat_every
        watch = liveness.BrokerWatch(self.broker, self.store, shown=broker_shown)
        if broker_lost is not None:
            watch.lost(broker_lost)
        silent_for = dead_after if self.capabilities.heartbeats is not None else None
        if self.notify.channels:  # approval notifications, on their own thread: a slow receiver delays no step
            notifications.Deliverer.of(self).start(stop)
        rounds = liveness.Outage("dispatch/sweep rounds work again", logger=logging.getLogger("sealflow.runtime"),
                                 level=logging.ERROR, over_level=logging.WARNING)
        listening = liveness.Outage("the store's wake-ups work again")
        left = self._left_steps = takeover.LeftSteps(self)  # steps others left for want of what they need
        self._serve_rounds(stop, watch, retention, left, rounds, listening, interval, dead_owner_check, silent_for)

    def _serve_rounds(self, stop: threading.Event, watch: liveness.BrokerWatch, retention: Retention | None,
                      left: takeover.LeftSteps, rounds: liveness.Outage, listening: liveness.Outage, interval: float,
                      dead_owner_check: float, silent_for: float | None) -> None:
        check_at = time.monotonic() + dead_owner_check
        sweep_at = 0.0
        while not stop.is_set():
            try:
                if watch.check():
                    if not self._recovered:
                        self.recover()
                        self._recovered = True
                    self.dispatcher.flush()
                if time.monotonic() >= check_at:
                    beats = self.capabilities.heartbeats
                    recovery.expire_dead_owners(self.store, self.clock.now(), self.owner, silent_for=silent_for,
                                                heartbeats=beats)
                    liveness.requeue_silent(beats, self.broker, silent_for)  # what they fetched from Redis
                    check_at = time.monotonic() + dead_owner_check
                if time.monotonic() >= sweep_at:  # a wake-up (a submit) is for the dispatcher: sweep on the clock
                    self.sweeper.sweep()
                    sweep_at = time.monotonic() + interval
                if retention is not None:
                    retention.maybe_prune(self.store, self.clock.now(), self.engine.actor)
                left.maybe_check()
                rounds.ok()
            except BrokerUnavailable as exc:  # a send failed: resend what was taken once the broker answers
                watch.lost(exc)
            except StoreError as exc:  # the store's disk or database: say what, once, and keep trying
                self.telemetry.metrics.store_error("round")  # sealflow_store_errors_total{where="round"}
                rounds.failed("dispatch/sweep round failed: %s; retrying", exc)
            except Exception:  # noqa: BLE001 - a long-lived worker outlives a busy store; the next round redoes it
                logging.getLogger("sealflow.runtime").exception("dispatch/sweep round failed; retrying")
            liveness.wait_for_work(self.capabilities.work_notification, stop, interval, listening)
