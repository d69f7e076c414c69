"""Prometheus metrics of one runtime (``prometheus_client``), exposed at ``/metrics`` by ``sealflow serve`` and by
each ``sealflow worker --metrics-port PORT`` (and ``sealflow scheduler --metrics-port PORT``).

Every name starts with ``sealflow_``; counters end in ``_total``, durations are histograms in seconds. Two kinds:

- *events* counted where they happen: the engine calls :meth:`Metrics.attempt_done` once per executed step
  attempt, :meth:`Metrics.refused` for a refused message and :meth:`Metrics.deferred` for a claim put off by a
  bulkhead, lock or pool; the HTTP API calls :meth:`Metrics.api_denied` for what it refuses (a failed
  authentication, a 403, another tenant's run answered as unknown); the events route counts signed
  deliveries; the notification deliverer calls :meth:`Metrics.notification` once per delivery attempt;
  ``sealflow scheduler`` calls :meth:`Metrics.schedule_error` once per definition it skips;
- *state* read from the store and the broker at scrape time (:class:`StoreCollector`): runs by state, dead
  letters, breaker states, the outbox and the broker's queue depths.

Each :class:`~sealflow.runtime.facade.Runtime` has its own :class:`Metrics` with its own registry, so
several runtimes in one process (tests) never share counters.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from sealflow.core.outcomes import Failed, Skipped, Succeeded, Waiting
from sealflow.store.capabilities import Capabilities

log = logging.getLogger("sealflow.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: an attempt refused before it ran for one of these error classes is a policy denial
DENIAL_CLASSES = frozenset({"unauthorized", "policy_denied", "budget_exceeded"})
#: why ``sealflow scheduler`` skipped a definition: its schedule does not validate (S209), another definition
#: error, a trust policy refused it, or a slot could not be computed at run time
SCHEDULE_ERRORS = frozenset({"invalid_schedule", "invalid_definition", "untrusted", "slot_failed"})
#: the ``via`` of ``sealflow_cross_tenant_attempts_total``: a step message, an API request
VIAS_CROSS_TENANT = ("message", "api")
#: where ``sealflow_store_errors_total`` counts a failed store operation: a worker's round, a scrape's read
STORE_ERROR_WHERE = ("round", "scrape")
#: a worker (a process executing steps) whose store heartbeat is older than this is not counted alive (the
#: same 15 s after which other workers take over its leases: ``sealflow worker``'s ``dead_after``)
ALIVE_WITHIN_S = 15.0
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


def outcome_label(outcome: Any) -> str:
    if isinstance(outcome, Succeeded):
        return "succeeded"
    if isinstance(outcome, Skipped):
        return "skipped"
    if isinstance(outcome, Waiting):
        return "waiting"
    if isinstance(outcome, Failed):
        return "timed_out" if outcome.timed_out else "failed"
    return type(outcome).__name__.lower()


def model_of(step: Any) -> str | None:
    for attr in ("ai", "agent"):
        spec = getattr(step, attr, None)
        if spec is not None:
            return cast(str | None, spec.model)
    return None


class Metrics:
    """The counters and histograms of one runtime, on :attr:`registry`."""

    def __init__(self, store: Any = None, broker: Any = None, queues: tuple[str, ...] = (), *,
                 capabilities: Capabilities | None = None, now: Callable[[], float] = time.time):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.step_attempts = Counter("sealflow_step_attempts", "Step attempts executed, by kind, outcome and "
                                     "error class", ["kind", "outcome", "error_class"], registry=r)
        self.step_retries = Counter("sealflow_step_retries", "Step attempts that were a retry (attempt > 1)",
                                    ["kind"], registry=r)
        self.step_timeouts = Counter("sealflow_step_timeouts", "Step attempts that ran out of time", ["kind"],
                                     registry=r)
        self.step_duration = Histogram("sealflow_step_duration_seconds", "Wall time of one step attempt, "
                                       "claim to commit", ["kind", "outcome"], buckets=_LATENCY_BUCKETS, registry=r)
        self.runs_finished = Counter("sealflow_runs_finished", "Runs that reached a final state", ["state"],
                                     registry=r)
        self.run_duration = Histogram("sealflow_run_duration_seconds", "Time from submission to a final state",
                                      ["state"], buckets=_LATENCY_BUCKETS, registry=r)
        self.model_duration = Histogram("sealflow_model_call_duration_seconds", "Wall time of model and agent "
                                        "step attempts", ["model"], buckets=_LATENCY_BUCKETS, registry=r)
        self.model_tokens = Counter("sealflow_model_tokens", "Model tokens used", ["model"], registry=r)
        self.model_cost = Counter("sealflow_model_cost_usd", "Model cost in US dollars", ["model"], registry=r)
        self.policy_denials = Counter("sealflow_policy_denials", "Refusals of the access and trust policies: step "
                                      "attempts refused before they ran (authorisation, trust, budget; via=attempt) "
                                      "and API requests refused (a failed authentication, a missing permission; "
                                      "via=api)", ["error_class", "via"], registry=r)
        self.messages_refused = Counter("sealflow_messages_refused", "Step messages refused at claim (stale, "
                                        "duplicate, forged or cross-tenant)", ["reason"], registry=r)
        self.cross_tenant = Counter("sealflow_cross_tenant_attempts", "Attempts to reach another tenant's runs: step "
                                    "messages naming another tenant than their run's (via=message), API requests "
                                    "for a run, approval or dead letter of a tenant the caller is not in (via=api)",
                                    ["via"], registry=r)
        for via in VIAS_CROSS_TENANT:  # exposed at 0 from the start, as before the label
            self.cross_tenant.labels(via)
        self.claims_deferred = Counter("sealflow_claims_deferred", "Claims put off: a bulkhead, lock or pool was "
                                       "full", ["reason"], registry=r)
        self.events = Counter("sealflow_events", "Signed events received, by source and result",
                              ["source", "result"], registry=r)
        self.notifications_delivered = Counter("sealflow_notifications_delivered", "Approval notifications "
                                               "delivered (a 2xx answer), by channel kind", ["kind"], registry=r)
        self.notification_attempts_failed = Counter("sealflow_notification_attempts_failed", "Approval notification "
                                                    "attempts that failed (retried or not), by channel kind",
                                                    ["kind"], registry=r)
        self.notifications_dead_lettered = Counter("sealflow_notifications_dead_lettered", "Approval notifications "
                                                   "given up after their attempts (failed for good), by channel kind",
                                                   ["kind"], registry=r)
        self.schedule_errors = Counter("sealflow_schedule_errors", "Scheduled definitions the scheduler skipped, by "
                                       "reason (invalid_schedule, invalid_definition, untrusted, slot_failed)",
                                       ["reason"], registry=r)
        if store is not None:
            r.register(StoreCollector(store, broker, queues, capabilities=capabilities, now=now,
                                      on_error=lambda: self.store_error("scrape")))
        # (registered after the store's collector, so a scrape whose reads fail already counts them)
        self.store_errors = Counter("sealflow_store_errors", "Store operations that failed, by where: a worker's "
                                    "dispatch/sweep round (round), a read at scrape time (scrape)", ["where"],
                                    registry=r)
        for where in STORE_ERROR_WHERE:  # exposed at 0 from the start: an alert on its rate needs the series
            self.store_errors.labels(where)
        #: (metric, label values) -> its child: ``labels()`` takes a lock and checks the values at every call
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *values: str) -> Any:
        key = (metric, *values)
        child = self._children.get(key)
        if child is None:
            if len(self._children) >= 4096:  # (label values come from plans and error classes: bounded anyway)
                self._children.clear()
            child = self._children[key] = metric.labels(*values)
        return child

    # -- hooks -------------------------------------------------------------------------------------
    def attempt_done(self, x: Any, outcome: Any, refused: Any, seconds: float) -> None:
        """One executed (or refused) step attempt; never raises into the engine."""
        try:
            kind = str(x.step.kind)
            label = outcome_label(outcome)
            error_class = getattr(outcome, "error_class", "") or ""
            if refused is not None and error_class in DENIAL_CLASSES:
                self.policy_denials.labels(error_class, "attempt").inc()
            self._child(self.step_attempts, kind, label, error_class).inc()
            self._child(self.step_duration, kind, label).observe(seconds)
            if x.attempt.attempt > 1 and not x.resumed:
                self.step_retries.labels(kind).inc()
            if label == "timed_out" or error_class == "timeout":
                self.step_timeouts.labels(kind).inc()
            model = model_of(x.step)
            if model is not None and refused is None:
                self.model_duration.labels(model).observe(seconds)
                tokens = getattr(outcome, "tokens", 0) or 0
                cost = getattr(outcome, "cost_usd", 0.0) or 0.0
                if tokens:
                    self.model_tokens.labels(model).inc(tokens)
                if cost:
                    self.model_cost.labels(model).inc(cost)
        except Exception:  # noqa: BLE001 - telemetry must never fail a step
            log.debug("metrics: attempt not recorded", exc_info=True)

    def run_done(self, state: str, created_at: float, now: float) -> None:
        self.runs_finished.labels(state).inc()
        self.run_duration.labels(state).observe(max(0.0, now - created_at))

    def refused(self, reason: str) -> None:
        self.messages_refused.labels(reason).inc()
        if reason == "tenant_mismatch":
            self.cross_tenant.labels("message").inc()

    def api_denied(self, error_class: str | None = None, *, cross_tenant: bool = False) -> None:
        """One request the HTTP API refused: ``error_class`` ``unauthenticated`` (a failed authentication) or
        ``unauthorized`` (a 403, or a member's missing permission answered as an unknown run) counts as a policy
        denial; ``cross_tenant``: a run, approval or dead letter of a tenant the caller is not in (answered as
        an unknown one). Never raises into a request."""
        try:
            if error_class is not None:
                self.policy_denials.labels(error_class, "api").inc()
            if cross_tenant:
                self.cross_tenant.labels("api").inc()
        except Exception:  # noqa: BLE001 - telemetry must never change an answer
            log.debug("metrics: API denial not counted", exc_info=True)

    def notification(self, kind: str, result: str) -> None:
        """One delivery attempt of a notification channel of ``kind`` (``webhook``, ``slack``; never its URL):
        ``delivered``, ``retried`` (a failed attempt, tried again later) or ``failed`` (a failed attempt, the
        last: dead-lettered)."""
        if result == "delivered":
            self.notifications_delivered.labels(kind).inc()
            return
        self.notification_attempts_failed.labels(kind).inc()
        if result == "failed":
            self.notifications_dead_lettered.labels(kind).inc()

    def schedule_error(self, reason: str) -> None:
        """A scheduled definition ``sealflow scheduler`` skipped: one of :data:`SCHEDULE_ERRORS` (a bounded label)."""
        self.schedule_errors.labels(reason if reason in SCHEDULE_ERRORS else "other").inc()

    def store_error(self, where: str) -> None:
        """A store operation failed (the database down, a disk full, a timeout): ``where`` one of
        :data:`STORE_ERROR_WHERE`. Never raises."""
        try:
            self.store_errors.labels(where if where in STORE_ERROR_WHERE else "other").inc()
        except Exception:  # noqa: BLE001 - telemetry must never fail a round
            log.debug("metrics: store error not counted", exc_info=True)

    def deferred(self, exc: Any) -> None:
        self.claims_deferred.labels("slot" if hasattr(exc, "position") else "bulkhead").inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class StoreCollector(Collector):
    """State read at scrape time: runs by state, dead letters, breakers, the outbox and the broker's queues.
    A failing read is logged and that family left out (a scrape never fails); runs by state only on a store
    with raw SQL reads (``capabilities``: the runtime's, else the store's, decided here)."""

    def __init__(self, store: Any, broker: Any = None, queues: tuple[str, ...] = (), *,
                 capabilities: Capabilities | None = None, on_error: Callable[[], None] | None = None,
                 now: Callable[[], float] = time.time):
        self.store, self.broker, self.queues = store, broker, queues
        #: the runtime's clock: a gate's timeout is on it
        self.now = now
        self.capabilities = capabilities if capabilities is not None else Capabilities.of(store)
        #: called once per failed read (``sealflow_store_errors_total{where="scrape"}``)
        self.on_error = on_error

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # families are produced at collect time only

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for read in (self._runs, self._dead_letters, self._breakers, self._outbox, self._queues, self._gates,
                     self._workers):
            try:
                yield from read()
            except Exception:  # noqa: BLE001 - a scrape must not fail because one read did
                log.warning("metrics: %s not collected", read.__name__.strip("_"), exc_info=True)
                if self.on_error is not None and read.__name__ != "_queues":  # (the broker's, not the store's)
                    self.on_error()

    def _runs(self) -> Iterator[GaugeMetricFamily]:
        reads = self.capabilities.sql_reads
        if reads is None:
            return
        g = GaugeMetricFamily("sealflow_runs", "Runs in the store, by state", labels=["state"])
        for state, count in reads._read("SELECT state, COUNT(*) FROM runs GROUP BY state"):
            g.add_metric([state], int(count))
        yield g

    def _dead_letters(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily("sealflow_dead_letters", "Dead letters, by status (dead, redriven, quarantined)",
                              labels=["status"])
        counts: dict[str, int] = {}
        for d in self.store.dead_letters(include_redriven=True):
            counts[d.status] = counts.get(d.status, 0) + 1
        for status in ("dead", "redriven", "quarantined"):
            g.add_metric([status], counts.get(status, 0))
        yield g

    def _breakers(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily("sealflow_breaker_state", "Circuit breakers: 1 for the state each one is in",
                              labels=["breaker", "state"])
        for b in self.store.breakers():
            for state in ("closed", "open", "half_open"):
                g.add_metric([b.name, state], 1 if b.state == state else 0)
        yield g

    def _outbox(self) -> Iterator[GaugeMetricFamily]:
        now = time.time()
        rows = self.store.outbox()
        due = [o for o in rows if o.sent_at is None]
        yield GaugeMetricFamily("sealflow_outbox_messages", "Step messages due and not yet sent to the broker",
                                value=len(due))
        oldest = min((o.due_at for o in due), default=None)
        yield GaugeMetricFamily("sealflow_outbox_oldest_age_seconds", "Age of the oldest unsent step message",
                                value=max(0.0, now - oldest) if oldest is not None else 0.0)
        sent = [o.sent_at for o in rows if o.sent_at is not None]
        yield GaugeMetricFamily("sealflow_queue_oldest_age_seconds", "Age of the oldest step message sent to the "
                                "broker and not yet claimed", value=max(0.0, now - min(sent)) if sent else 0.0)

    def _gates(self) -> Iterator[GaugeMetricFamily]:
        """Gates waiting for a person with a timeout (approvals, lost attempts whose outcome is unknown): how many,
        and the seconds until the soonest one times out (no sample while none is open)."""
        reads = self.capabilities.sql_reads
        if reads is None:
            return
        rows = reads._read("SELECT COUNT(*), MIN(fire_at) FROM timers WHERE kind = 'approval_timeout'")
        count, soonest = rows[0] if rows else (0, None)
        yield GaugeMetricFamily("sealflow_approval_gates_open", "Gates waiting for a person's decision with a "
                                "timeout (approvals, lost attempts of unknown outcome)", value=int(count or 0))
        g = GaugeMetricFamily("sealflow_approval_gate_soonest_expiry_seconds", "Seconds until the soonest open "
                              "gate times out (negative: overdue, the sweeper has not fired it yet)")
        if soonest is not None:
            g.add_metric([], float(soonest) - self.now())
        yield g

    def _workers(self) -> Iterator[GaugeMetricFamily]:
        """Processes executing steps whose store heartbeat is under :data:`ALIVE_WITHIN_S` old (stores with
        heartbeats: PostgreSQL)."""
        reads = self.capabilities.sql_reads
        if reads is None or self.capabilities.heartbeats is None:
            return
        rows = reads._read("SELECT COUNT(*) FROM workers WHERE heartbeat_at > now() - make_interval(secs => ?)",
                           (ALIVE_WITHIN_S,))
        yield GaugeMetricFamily("sealflow_workers_alive", "Processes executing steps whose store heartbeat is "
                                f"under {ALIVE_WITHIN_S:.0f} s old", value=int(rows[0][0]) if rows else 0)

    def _queues(self) -> Iterator[GaugeMetricFamily]:
        if self.broker is None or not self.queues:
            return
        g = GaugeMetricFamily("sealflow_queue_depth", "Messages waiting in each broker queue", labels=["queue"])
        for q in self.queues:
            g.add_metric([q], queue_depth(self.broker, q))
        yield g


def queue_depth(broker: Any, queue: str) -> int:
    """Messages waiting on ``queue``: a ``StubBroker``'s in-memory queue, a Redis list or a RabbitMQ queue."""
    from sealflow.runtime import brokers

    if brokers.is_rabbitmq(broker):
        return brokers.queue_depth(broker, queue)
    queues = getattr(broker, "queues", None)
    if isinstance(queues, dict) and hasattr(queues.get(queue), "qsize"):
        return int(queues[queue].qsize())
    client = getattr(broker, "client", None)
    if client is not None:
        return int(client.llen(f"{broker.namespace}:{queue}"))
    return 0


def serve_metrics(metrics: Metrics, port: int, addr: str = "127.0.0.1") -> Any:
    """Expose ``metrics`` on ``http://addr:port/metrics`` from a daemon thread (``sealflow worker --metrics-port``)."""
    from prometheus_client import start_http_server

    return start_http_server(port, addr=addr, registry=metrics.registry)
