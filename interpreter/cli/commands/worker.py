"""``sealflow worker``: a long-lived worker process of the distributed deployment.

    sealflow worker --broker redis://127.0.0.1:6379/0 --store sqlite:////srv/sealflow/state.db \\
        --actions myco.actions --access access.yaml --threads 32 --queue sealflow
    sealflow worker --broker amqp://USER:PASSWORD@rabbit:5672/%2F ...   # RabbitMQ, publisher confirms on

It registers the actions of the ``--actions`` modules and no others (unlike the embedded quick start,
not the demo world: pass ``--actions sealflow.demo`` for it), opens the store, builds the Dramatiq broker its
``--broker`` URL names, a ``RedisBroker`` or a ``RabbitmqBroker`` with publisher confirms
(:func:`sealflow.runtime.brokers.broker_from_url`:
``Retries`` pinned to zero, the interpreter retries), recovers what is in flight, prints one
``worker ready: ...`` line on stdout and then serves (:meth:`sealflow.runtime.facade.Runtime.serve`):
it executes step messages from the queue, sends what the store's outbox holds (so a run queued by
``sealflow submit`` in another process is picked up within a fraction of a second), sweeps expired
leases and due timers, and ends the leases of dead workers of this machine. Each step message it takes
is logged at INFO on stderr (a message carries its run on in the same thread for up to 16 consecutive
steps, each claimed by the commit of the one before, then the rest goes back through the broker).

Where it may run: several workers on one machine share one SQLite store file (WAL, every write one
fenced transaction). Workers on several machines need a network store; the Redis store is not built
yet, so today a deployment is one machine (a SQLite file on a network file system is not safe).

It refuses to start without an access policy (``--access FILE`` or ``$SEALFLOW_ACCESS``; exit 1)
unless ``--allow-open`` (development only). A broker URL that is neither Redis (``redis://``, ``rediss://``,
``unix://``) nor RabbitMQ (``amqp://``, ``amqps://``) is a usage error (exit 2).
A broker it cannot reach, at start or later, is waited for: it logs a warning and retries with backoff
(0.5 s doubling to 30 s) instead of exiting, and once the broker is back (or restarted, its queues lost)
it sends again every message sent but never claimed, so queued runs move within a second. A PostgreSQL
store that cannot be reached at start (down, restarting) is waited for the same way. On a store
with heartbeats (PostgreSQL) it beats every 2 s and takes over the leases of workers silent for 15 s, on
any machine; it waits for new work on the store's wake-ups (LISTEN/NOTIFY) instead of polling.

Stopping (SIGTERM or SIGINT): the worker *finishes* what it is running. It stops dispatching and
taking messages, gives the attempts already running (those it took over from other workers included:
service/takeover.py) up to ``--grace`` seconds to finish and commit,
puts the messages it fetched but had not started back on the queue (any left in Dramatiq's prefetch
buffer are requeued once its heartbeat is old, or resent by a sweeper), and exits 0. An attempt
still running after the grace period (or at a second signal, which exits at once with 1) is
*abandoned*: its result is never committed; its lease is ended by another worker on this machine
within about a second (else it expires: the step's timeout plus a margin) and another worker runs
the step again. A completed effect with an idempotency key is not repeated (the ledger); an effect
cut off before its commit is, unless the action passes ``ctx.idempotency_key`` on to its provider.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

import click

from sealflow.cli.exits import fail_usage
from sealflow.cli.options import access_option, actions_option, metrics_options
from sealflow.cli.session import import_actions, load_access, load_config, require_policy, store_location, trust_path

if TYPE_CHECKING:
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    from sealflow.policy.trustgate import TrustGate
    from sealflow.runtime.facade import Runtime

log = logging.getLogger("sealflow.worker")

DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
_QUEUE = re.compile(r"^[A-Za-z_][A-Za-z0-9._-]{0,127}$")


def _check_queue(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not _QUEUE.match(value) or value.endswith((".DQ", ".XQ")):
        raise click.BadParameter(f"{value!r} is not a queue name: a letter or '_', then letters, digits, '.', '_' "
                                 "or '-' (not ending in .DQ or .XQ), like sealflow")
    return value


def redact(url: str) -> str:
    """``url`` with its password (``redis://user:PASSWORD@host``, ``amqp://user:PASSWORD@host`` or
    ``?password=``) shown as ``***``."""
    url = re.sub(r"^([a-z]+://[^/@:]*:)[^/]*@", r"\1***@", url)
    return re.sub(r"([?&]password=)[^&]*", r"\1***", url)


def step_log() -> Any:
    """A Dramatiq middleware that logs each step message this worker runs at INFO and remembers the
    ones in progress (so a shutdown can name what it abandons). It is also the runtime's ``watch``
    (:class:`~sealflow.runtime.actors.CarryWatch`): the step actor tells it which step a message carried its run on
    to (:attr:`at`) and the state the message's last commit left the run in, which the log line says (else it is
    read from its ``store`` when set). (Built on call: the command line imports Dramatiq only when it runs; so its
    class, a ``dramatiq.Middleware`` and a ``CarryWatch``, is not a type this module can name: ``Any``.)"""
    import dramatiq

    from sealflow.runtime.actors import Ids
    from sealflow.store.base import Store

    class StepLog(dramatiq.Middleware):
        def __init__(self) -> None:
            self.store: Store | None = None
            self.running: dict[str, tuple[Ids, float]] = {}
            #: a running message's ids -> the step it carried its run on to (when it did)
            self.at: dict[Ids, Ids] = {}
            #: a message's ids -> the state its last commit left the run in (until its line is logged)
            self.states: dict[Ids, str] = {}
            self._lock = threading.Lock()

        def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.MessageProxy) -> None:
            ids = _ids(message)
            if ids is None:  # not a step message's shape: the actor refuses it, and says so
                return
            with self._lock:
                self.running[message.message_id] = (ids, time.monotonic())
            log.info("run %s: step %s attempt %s: started", *ids)

        def carried(self, first: Ids, now: Ids) -> None:
            self.at[first] = now

        def ended(self, first: Ids, state: str | None) -> None:
            self.at.pop(first, None)
            if state is not None:
                self.states[first] = state

        def after_process_message(self, broker: dramatiq.Broker, message: dramatiq.MessageProxy, *,
                                  result: Any = None, exception: BaseException | None = None) -> None:
            with self._lock:
                ids, started = self.running.pop(message.message_id, (None, time.monotonic()))
            ids = ids or _ids(message)  # (checked when it started; a message skipped before that, here)
            if ids is None:
                return
            run_id, step_id, attempt = ids
            state = self.states.pop(ids, None)  # (the step actor's: its last commit's)
            try:
                if state is None:  # this thread committed nothing of the run (a refused or left message): read it
                    state = self.store.get_run(run_id).state if self.store is not None else "?"
            except Exception:  # noqa: BLE001 - a log line must not fail the message (the store may be closing)
                state = "?"
            log.info("run %s: step %s attempt %s: handled in %.0f ms; the run is %s", run_id, step_id, attempt,
                     (time.monotonic() - started) * 1000, state)

        after_skip_message = after_process_message

    def _ids(message: dramatiq.MessageProxy) -> Ids | None:
        from sealflow.runtime.actors import MalformedMessage, step_message

        try:
            return step_message(tuple(message.args), dict(message.kwargs))[:3]
        except MalformedMessage:
            return None

    return StepLog()


def _setup_logging(log_format: str = "text", level: str = "info") -> None:
    from sealflow.runtime.telemetry import logging as telemetry_logging

    telemetry_logging.setup(log_format, sys.stderr, getattr(logging, level.upper()))
    # pika (RabbitMQ) logs every stage of every connection, and each failed one as errors with tracebacks:
    # the worker says itself what it cannot reach and that it retries (Dramatiq's consumers too)
    logging.getLogger("pika").setLevel(logging.CRITICAL)


def _install_signals(stop: threading.Event) -> None:
    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            os.write(2, f"sealflow worker: second {signal.Signals(signum).name}: exiting now, abandoning the "
                        "running attempts (their leases end and other workers take them)\n".encode())
            os._exit(1)
        # set the event from another thread: the main thread may hold the event's lock right now
        threading.Thread(target=stop.set, name="sealflow-stop").start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def _trust_gate(trust: str | None, allow_unsigned: bool, actor: str = "worker") -> TrustGate:
    """This worker's own trust decision: with --trust it verifies every run's stored definition bytes and
    signature against *this* policy (never the submitter's); unsigned runs only with --allow-unsigned."""
    from sealflow.policy.trustgate import TrustGate

    if trust is None:
        if allow_unsigned:
            log.warning("no --trust: signatures are not verified; this worker executes every run "
                        "(--allow-unsigned, development only)")
        return TrustGate(allow_unsigned=allow_unsigned, actor=actor)
    from sealflow.cli.session import load_trust_policy

    return TrustGate(allow_unsigned=allow_unsigned, policy=load_trust_policy(trust), actor=actor)


@click.command()
@click.option("--broker", "broker_url", metavar="URL", envvar="SEALFLOW_BROKER", default=DEFAULT_BROKER,
              show_default=True, help="Broker URL ($SEALFLOW_BROKER): Redis, redis://HOST:PORT/DB (rediss:// for TLS, "
                                      "unix:///path), or RabbitMQ, amqp://USER:PASSWORD@HOST:5672/VHOST (amqps:// "
                                      "for TLS; publisher confirms on).")
@click.option("--store", "store_url", metavar="URL", envvar="SEALFLOW_STORE",
              help="State store: sqlite:///PATH, shared by every worker on this machine ($SEALFLOW_STORE; default "
                   "sqlite:///.sealflow/state.db). Several machines need a network store: the Redis store is not "
                   "built yet.")
@actions_option
@access_option
@click.option("--allow-open", is_flag=True,
              help="Start without an access policy (open development mode: anyone may do anything). Development only.")
@click.option("--trust", metavar="POLICY", envvar="SEALFLOW_TRUST",
              help="Trust policy: execute only runs whose stored definition bytes verify against this policy "
                   "(the worker's own; a submitter's policy is never trusted).")
@click.option("--allow-unsigned", is_flag=True,
              help="Development: also execute runs of unsigned definitions (refused by default).")
@click.option("--threads", type=click.IntRange(1, 256), default=32, show_default=True,
              help="Worker threads: step messages run at the same time in this process (a thread waits for the "
                   "store and for its action's I/O, so a process keeps many busy).")
@click.option("--queue", "queue_name", metavar="NAME", default="sealflow", show_default=True, callback=_check_queue,
              help="The Dramatiq queue to consume and send to; every worker of one store uses the same one.")
@click.option("--priorities", metavar="LIST", default=None,
              help="Serve only runs of these priorities, e.g. critical,high: a worker dedicated to urgent work "
                   "(default: every priority, critical first). Each priority has its own queue: QUEUE.critical, "
                   "QUEUE.high, QUEUE, QUEUE.low.")
@click.option("--grace", type=click.FloatRange(0), default=30.0, show_default=True, metavar="SECONDS",
              help="At SIGTERM/SIGINT, how long running attempts may take to finish before they are abandoned.")
@click.option("--redeliver-after", type=click.FloatRange(1), default=60.0, show_default=True, metavar="SECONDS",
              help="Send a message again when it was sent this long ago and never claimed (lost with a dead worker).")
@metrics_options
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              envvar="SEALFLOW_LOG_FORMAT",
              help="Log lines on stderr: text, or one JSON object a line with run, step, attempt and trace ids.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True, envvar="SEALFLOW_LOG_LEVEL",
              help="The least severe lines logged: info names each step message (started, handled); debug "
                   "also each step a message's thread carries its run on to.")
def worker(broker_url: str, store_url: str | None, actions: tuple[str, ...], access_path: str | None, allow_open: bool,
           trust: str | None, allow_unsigned: bool, threads: int, queue_name: str, priorities: str | None,
           grace: float, redeliver_after: float, metrics_port: int | None, metrics_addr: str, log_format: str,
           log_level: str) -> None:
    """Run steps from a Redis or RabbitMQ broker until SIGTERM/SIGINT (the distributed deployment).

    Every worker of one deployment loads the same --actions (only those: the demo world's actions too
    only with --actions sealflow.demo) and shares the store; several workers on
    one machine may share one SQLite store file. Several machines need a network store (the Redis
    store is not built yet). `sealflow submit --store URL` queues runs for the workers; no --broker
    is needed there: the workers send what the store's outbox holds.

    At SIGTERM/SIGINT running attempts get --grace seconds to finish; one still running after that
    is abandoned (its lease ends, another worker reruns it). Exit 0 after a clean stop, 1 refused (no
    access policy), 2 usage error (a bad broker URL, a bad store URL). An unreachable broker is waited
    for (logged, retried with backoff), not an error.
    """
    from sealflow.runtime.priority import parse_priorities

    trust = trust_path(trust)  # --trust, $SEALFLOW_TRUST, else sealflow.yaml's trust:
    try:
        served = parse_priorities(priorities)
    except ValueError as exc:
        fail_usage(f"--priorities: {exc}")
    provider = load_access(access_path, quiet=True)  # refused below, or warned by the runtime (--allow-open)
    if not allow_open:
        require_policy(provider, "sealflow worker")
    import_actions(actions, demo=False)  # only what it is given: `--actions sealflow.demo` for the demo world
    from sealflow.runtime.brokers import broker_from_url
    from sealflow.runtime.facade import Runtime
    from sealflow.store import StoreError

    shown = redact(broker_url)
    try:
        broker = broker_from_url(broker_url)
    except ValueError as exc:
        fail_usage(f"--broker {shown}: {exc}")
    stop = threading.Event()
    _install_signals(stop)
    _setup_logging(log_format, log_level)
    from sealflow.core import redacted_output

    # what it prints (an action's print(), a traceback) has the secrets it resolves redacted, as its logs do
    click.get_current_context().call_on_close(redacted_output.arm())
    try:
        up = _wait_for_broker(broker, shown, stop)
    except ValueError as exc:  # a URL redis-py parses only when it connects (a port that is not a number)
        fail_usage(f"--broker {shown}: {exc}")
    if not up:
        log.info("worker stopped before the broker came up")
        return
    steps = step_log()
    broker.add_middleware(steps)

    url = store_location(store_url)
    config = load_config()
    try:
        rt = _wait_for_store(lambda: Runtime(url, access=provider, config=config, broker=broker, queue_name=queue_name,
                                             worker_threads=threads, redeliver_after=redeliver_after,
                                             priorities=served, watch=steps, trust_gate=lambda actor: _trust_gate(
                                                 trust, allow_unsigned, actor)), url, stop)
    except StoreError as exc:
        fail_usage(str(exc))
    if rt is None:
        log.info("worker stopped before the store came up")
        return
    steps.store = rt.store
    if metrics_port is not None:
        from sealflow.runtime.telemetry.metrics import serve_metrics

        try:
            serve_metrics(rt.telemetry.metrics, metrics_port, metrics_addr)
        except OSError as exc:
            rt.close(grace=0)
            fail_usage(f"--metrics-port {metrics_port}: cannot listen on {metrics_addr}:{metrics_port}: {exc}")
    from sealflow.runtime.telemetry import tracing

    tracing.configure()  # OTLP export only when OTEL_EXPORTER_OTLP_ENDPOINT is set
    from sealflow.runtime.liveness import BrokerUnavailable

    lost = None
    try:
        try:
            rt.start()  # the Dramatiq worker, then recovery of what is in flight
        except (StoreError, BrokerUnavailable) as exc:  # lost since the checks above: serve() tries it again
            log.warning("recovering the runs in flight failed at start: %s; serving, and trying again each round",
                        exc)
            lost = exc if isinstance(exc, BrokerUnavailable) else None
        if hasattr(broker, "broker_id"):  # Redis: the id of this worker's heartbeat (a test removes it)
            redis = cast("RedisBroker", broker)
            log.info("dramatiq broker id %s (namespace %s)", redis.broker_id, redis.namespace)
        click.echo(f"worker ready: broker {shown}, store {getattr(rt.store, 'url', url)}, "
                   f"queue {queue_name}, {threads} thread{'s' if threads != 1 else ''}"
                   + ("" if len(served) == 4 else f", priorities {','.join(served)}"))
        sys.stdout.flush()
        rt.serve(stop, allow_open=allow_open, broker_shown=shown, broker_lost=lost)
        log.info("stopping: running attempts have %.0f s to finish", grace)
    finally:
        rt.close(grace=grace)
    for args, _ in list(steps.running.values()):
        run_id, step_id, attempt = steps.at.get(args, args)  # the step the run was carried on to, if it was
        log.warning("run %s: step %s attempt %s: abandoned; its lease ends and another worker runs it again",
                    run_id, step_id, attempt)
    _forget_heartbeat(broker)
    log.info("worker stopped")


def _wait_for_broker(broker: dramatiq.Broker, shown: str, stop: threading.Event) -> bool:
    """Ping the broker until it answers, with backoff (0.5 s doubling to 30 s), logging each miss; False if
    ``stop`` was set first. A broker that is down at start is an outage to ride out, not a usage error."""
    from sealflow.runtime.brokers import describe, ping
    from sealflow.runtime.liveness import backoff_delays

    started = time.monotonic()
    for delay in backoff_delays():
        try:
            ping(broker)
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001 - redis-py and pika raise several kinds: all mean "not there yet"
            log.warning("cannot reach the broker at %s (%s); retrying in %.1f s (waiting %.0f s so far; start "
                        "the broker there or fix --broker)", shown, describe(exc), delay, time.monotonic() - started)
            if stop.wait(delay):
                return False
            continue
        if time.monotonic() - started > 0.1:
            log.info("the broker at %s answers after %.0f s", shown, time.monotonic() - started)
        return True
    return False  # pragma: no cover - backoff_delays never ends


def _wait_for_store(make: Callable[[], Runtime], url: str | None, stop: threading.Event) -> Runtime | None:
    """``make()`` (the runtime, which opens the store), retried with backoff (0.5 s doubling to 30 s) while a
    network store (PostgreSQL) cannot be reached, logging each miss; None if ``stop`` was set first. A
    database that is down or restarting is an outage to ride out; a SQLite file that cannot be opened, a bad
    URL or a schema to migrate is a usage error (``StoreError``, raised)."""
    from sealflow.runtime.liveness import backoff_delays
    from sealflow.store import StoreUnavailable

    started = time.monotonic()
    for delay in backoff_delays():
        try:
            made = make()
        except StoreUnavailable as exc:
            if not (url or "").startswith(("postgresql://", "postgres://")):
                raise
            log.warning("cannot reach the store: %s; retrying in %.1f s (waiting %.0f s so far; start the database "
                        "or fix --store)", exc, delay, time.monotonic() - started)
            if stop.wait(delay):
                return None
            continue
        if time.monotonic() - started > 0.1:
            log.info("the store answers after %.0f s", time.monotonic() - started)
        return made
    return None  # pragma: no cover - backoff_delays never ends


def _forget_heartbeat(broker: Any) -> None:
    """Remove this worker's Dramatiq heartbeat when it holds no unacknowledged message (a clean stop
    leaves nothing in Redis); with one left (an abandoned attempt) keep it, so Dramatiq requeues it
    once the heartbeat is old. RabbitMQ keeps no heartbeats: it requeues a closed connection's messages."""
    if not hasattr(broker, "broker_id"):
        return
    try:
        acks = f"{broker.namespace}:__acks__.{broker.broker_id}."
        if next(iter(broker.client.scan_iter(match=acks + "*", count=1000)), None) is None:
            broker.client.zrem(f"{broker.namespace}:__heartbeats__", broker.broker_id)
    except Exception:  # noqa: BLE001 - tidiness only; Dramatiq's maintenance removes old heartbeats too
        log.debug("could not remove the heartbeat of broker %s", broker.broker_id, exc_info=True)


def register(group: click.Group) -> None:
    group.add_command(worker)
