"""The deliverer: due notification rows -> HTTP POSTs, with bounded retries, never touching a run.

Each round takes due rows (:meth:`Store.take_deliveries`: leased for the request timeout plus a margin, so
concurrent deliverers in workers and ``serve`` never post the same row at once) and posts each once:

* a 2xx answer: ``delivered``;
* anything else (a non-2xx status, a redirect: redirects are never followed, a timeout, a refused
  connection, an address the configuration does not allow, a missing secret): due again after an
  exponential backoff with jitter (``backoff.first`` * 2^(attempt-1), capped at ``backoff.max``, times a
  random 0.5-1.0), until ``max_attempts``; then ``failed`` (dead-lettered, audited ``notification_failed``,
  listed by ``sealflow notifications list --failed``).

Response bodies are neither read beyond a small bound nor stored; what is kept of a failure is the status
code or the error's class, never a URL (a Slack URL is a credential) or a secret. A delivery never blocks or
fails a run: the gate opened in its own commit; this runs on its own thread or process.

Every post is guarded (:class:`~sealflow.operations.outbound.AddressGuard`, from the configuration's
``allow_networks``): the URL's host is resolved once and the post goes only to those addresses, each public or
allow-listed; loopback, link-local, private, unspecified, multicast and cloud metadata addresses are refused
before any connection is made.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sealflow.core.clock import SYSTEM, Clock
from sealflow.operations import outbound
from sealflow.store.deliveries import Deliveries, DeliveryRecord

from . import bodies
from .config import Channel, NotifyConfig

if TYPE_CHECKING:
    from sealflow.execution.secrets import SecretChain

log = logging.getLogger("sealflow.notifications")


class DeliveryFailed(Exception):
    """One attempt failed: the message says why without a URL, a secret or a response body."""


@dataclasses.dataclass
class Report:
    delivered: int = 0
    retried: int = 0
    failed: int = 0

    def __bool__(self) -> bool:
        return bool(self.delivered or self.retried or self.failed)


def post(url: str, body: bytes, headers: dict[str, str], timeout: float, *,
         guard: outbound.AddressGuard | None = None) -> int:
    """POST ``body`` to ``url``; the status code (:func:`sealflow.operations.outbound.request`: no
    redirect followed, a little of the answer read and dropped, every socket operation bounded; only to an
    address ``guard`` allows, None: a guard with nothing allow-listed)."""
    try:
        status, _ = outbound.request("POST", url, body=body, headers={**headers,
                                     "user-agent": "sealflow-notifications/1"}, timeout=timeout,
                                     guard=guard or outbound.AddressGuard())
    except outbound.OutboundError as exc:
        raise DeliveryFailed(str(exc)) from None
    return status


class Deliverer:
    """Posts due deliveries of one store per ``config`` (see the module docstring)."""

    def __init__(self, store: Deliveries, config: NotifyConfig, secrets: SecretChain, *, clock: Clock = SYSTEM,
                 rng: random.Random | None = None,
                 poster: Callable[[str, bytes, dict[str, str], float], int] | None = None,
                 batch: int = 20, metrics: Any = None):
        self.store, self.config, self.secrets, self.clock = store, config, secrets, clock
        self.rng = rng or random.Random()
        #: posts one delivery; by default :func:`post` guarded by the configuration's ``allow_networks``
        self.poster = poster or functools.partial(post, guard=config.guard)
        self.batch = batch
        #: a :class:`~sealflow.runtime.telemetry.metrics.Metrics` counting attempts, or None
        self.metrics = metrics

    @classmethod
    def of(cls, runtime: Any) -> Deliverer:
        """The deliverer of a :class:`~sealflow.runtime.facade.Runtime`: its store, its
        configuration's channels and secrets, its clock, its metrics."""
        from sealflow.execution.secrets import chain_for

        telemetry = getattr(runtime, "telemetry", None)
        return cls(runtime.store, runtime.notify, chain_for(runtime.config), clock=runtime.clock,
                   metrics=getattr(telemetry, "metrics", None))

    def delay(self, attempts: int) -> float:
        """Seconds before the next try after ``attempts`` failed ones: exponential, capped, jittered."""
        base = min(self.config.backoff_max, self.config.backoff_first * 2.0 ** max(attempts - 1, 0))
        return base * self.rng.uniform(0.5, 1.0)

    def deliver_once(self) -> Report:
        """One round: take the due deliveries and post each once."""
        report = Report()
        lease = self.config.timeout * 2 + 30.0
        for taken in self.store.take_deliveries(self.batch, lease):
            self._deliver(taken, report)
        return report

    def drain(self, most: int = 100) -> Report:
        """Rounds until nothing is due (at most ``most``): ``sealflow notifications deliver --once``."""
        total = Report()
        for _ in range(most):
            got = self.deliver_once()
            total.delivered += got.delivered
            total.retried += got.retried
            total.failed += got.failed
            if not got:
                break
        return total

    def _deliver(self, taken: DeliveryRecord, report: Report) -> None:
        channel = self.config.channels.get(taken.channel)
        try:
            if channel is None:
                raise DeliveryFailed(f"channel {taken.channel!r} is no longer configured")
            url, body, headers = self._request(channel, taken)
            status = self.poster(url, body, headers, self.config.timeout)
            if 200 <= status < 300:
                self.store.settle_delivery(taken, state="delivered")
                report.delivered += 1
                self._count(taken, "delivered")
                return
            raise DeliveryFailed(f"HTTP {status}" + (" (a redirect: not followed)" if 300 <= status < 400 else ""))
        except DeliveryFailed as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - a bug of ours must not stop the other deliveries
            log.exception("notification %s on channel %r: unexpected error", taken.id, taken.channel)
            error = f"internal error ({type(exc).__name__})"
        now = self.clock.now()
        if taken.attempts >= self.config.max_attempts or channel is None:
            self.store.settle_delivery(taken, state="failed", error=error)
            report.failed += 1
            self._count(taken, "failed")
            log.error("notification %s of run %s on channel %r failed for good after %d attempt(s): %s",
                      taken.id, taken.run_id, taken.channel, taken.attempts, error)
            return
        self.store.settle_delivery(taken, state="pending", next_at=now + self.delay(taken.attempts), error=error)
        report.retried += 1
        self._count(taken, "retried")
        log.warning("notification %s on channel %r: attempt %d failed (%s); retrying", taken.id, taken.channel,
                    taken.attempts, error)

    def _count(self, taken: DeliveryRecord, result: str) -> None:
        if self.metrics is not None:
            try:
                self.metrics.notification(taken.kind, result)
            except Exception:  # noqa: BLE001 - telemetry must never stop a delivery
                log.debug("metrics: notification not counted", exc_info=True)

    def _request(self, channel: Channel, taken: DeliveryRecord) -> tuple[str, bytes, dict[str, str]]:
        url = channel.url or self._secret(channel.url_secret or "")
        if channel.kind == "slack":
            body, headers = bodies.slack(taken.payload)
        else:
            secret = self._secret(channel.secret or "")
            try:
                body, headers = bodies.webhook(taken.id, taken.payload, secret, int(time.time()))
            except ValueError:
                raise DeliveryFailed(f"the secret {channel.secret} is not a whsec_<base64> signing secret") from None
        return url, body, headers

    def _secret(self, name: str) -> str:
        try:
            return self.secrets.resolve([name])[name]
        except Exception:  # noqa: BLE001 - which provider failed is the operator's to see in its own logs
            raise DeliveryFailed(f"the secret {name} is not available") from None

    # -- a background thread (workers, serve) ------------------------------------------------------
    def run(self, stop: threading.Event, interval: float = 1.0) -> None:
        """Rounds until ``stop`` is set; a failing round (the store busy or away) is logged and tried again."""
        while not stop.is_set():
            try:
                if self.deliver_once():
                    continue
            except Exception:  # noqa: BLE001 - the next round tries again
                log.warning("a notification round failed; retrying", exc_info=True)
            stop.wait(interval)

    def start(self, stop: threading.Event, interval: float = 1.0) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop, interval), name="sealflow-notifications", daemon=True)
        thread.start()
        return thread
