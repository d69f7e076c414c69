"""OpenTelemetry traces: one trace per run, one span per step attempt (``sealflow.step``) with a child span for
the model call of a model or agent step (``sealflow.model``).

A run's trace id is derived from its run id (:func:`trace_id_of`), so every worker that executes one of the
run's steps puts its span in the same trace without sharing anything but the run id. What a step message
carries across the broker is the *parent*: :class:`TraceMiddleware` stamps the sender's current span into the
Dramatiq message's options as a W3C ``traceparent`` (the embedded broker and Redis alike) and the receiving
worker starts the attempt's span under it, so the spans of a run chain step to step.

Nothing is exported unless configured: :func:`configure` installs the SDK's tracer provider with an OTLP
exporter when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (``pip install opentelemetry-exporter-otlp``) or with the
exporter it is given (tests pass the SDK's ``InMemorySpanExporter``); otherwise the API's no-op tracer is used.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("sealflow.tracing")

TRACER_NAME = "sealflow"
_PROPAGATOR = TraceContextTextMapPropagator()
#: the message option that carries the sender's span (W3C traceparent)
OPTION = "sealflow_traceparent"


def trace_id_of(run_id: str) -> int:
    """The run's 128-bit trace id (never 0), derived from its id."""
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:16], "big") or 1


#: run id -> its root span context and that context's traceparent (bounded: cleared when full)
_ROOTS: dict[str, tuple[SpanContext, str]] = {}
_ROOTS_MAX = 4096


def _root(run_id: str) -> tuple[SpanContext, str]:
    """The run's (virtual) root span context and its W3C traceparent, derived from the run id (cached)."""
    got = _ROOTS.get(run_id)
    if got is None:
        span_id = int.from_bytes(hashlib.sha256(b"root:" + run_id.encode()).digest()[:8], "big") or 1
        sc = SpanContext(trace_id=trace_id_of(run_id), span_id=span_id, is_remote=True,
                         trace_flags=TraceFlags(TraceFlags.SAMPLED))
        if len(_ROOTS) >= _ROOTS_MAX:
            _ROOTS.clear()
        got = _ROOTS[run_id] = (sc, f"00-{sc.trace_id:032x}-{span_id:016x}-01")
    return got


def _run_root(run_id: str) -> SpanContext:
    return _root(run_id)[0]


def parent_context(run_id: str, traceparent: str | None = None) -> Any:
    """The context an attempt's span starts in: the sender's span when the message carried one of this run's
    trace, else the run's (virtual) root."""
    if traceparent:
        ctx = _PROPAGATOR.extract({"traceparent": traceparent})
        sc = trace.get_current_span(ctx).get_span_context()
        if sc.is_valid and sc.trace_id == trace_id_of(run_id):
            return ctx
    return trace.set_span_in_context(NonRecordingSpan(_run_root(run_id)))


def records(tracer: Any, provider: Any = None) -> bool:
    """Whether spans started on ``tracer`` (made by :func:`tracer` from ``provider``) can be recorded: False for
    the API's no-op tracer, and for the global proxy while no SDK provider is installed (it may be later:
    :func:`configure`, so this is asked at each attempt)."""
    if isinstance(tracer, trace.NoOpTracer):
        return False
    return not (provider is None and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider))


def untraced_ids(run_id: str) -> tuple[str, str] | None:
    """Where no span is recorded (:func:`records` is False): the ``(trace_id, span_id)`` (hex) the attempt's
    no-op span would have, and it becomes the parent of the messages its commit makes due, exactly as the
    no-op tracer's span would (it carries its parent's context: the run's root, or the sender's span).
    None when the message carried a span other than the run's root (a sender that records): the caller then
    takes the general path, which parses it."""
    import threading

    tid = threading.get_ident()
    sc, tp = _root(run_id)
    incoming = _incoming.get(tid)
    if incoming and incoming != tp:
        return None
    _last[tid] = (run_id, tp)
    return format(sc.trace_id, "032x"), format(sc.span_id, "016x")


def current_traceparent() -> str | None:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


#: the traceparent of the message being processed in this thread (set by TraceMiddleware)
_incoming: dict[int, str | None] = {}
#: the run id and traceparent of the last attempt span this thread ran: the messages its commit made due are
#: sent after the span ended, and carry it as their parent
_last: dict[int, tuple[str, str]] = {}


@contextlib.contextmanager
def attempt_span(x: Any, tracer: Any) -> Iterator[Any]:
    """The span of one step attempt, in the run's trace."""
    import threading

    parent = parent_context(x.run.id, _incoming.get(threading.get_ident()))
    attrs = {"sealflow.run_id": x.run.id, "sealflow.step_id": x.step_id, "sealflow.attempt": x.attempt.attempt,
             "sealflow.step_kind": str(x.step.kind), "sealflow.workflow": x.run.workflow,
             "sealflow.tenant": x.run.tenant}
    with tracer.start_as_current_span("sealflow.step", context=parent, attributes=attrs,
                                      kind=trace.SpanKind.CONSUMER) as span:
        tp = current_traceparent()
        if tp:
            _last[threading.get_ident()] = (x.run.id, tp)
        yield span


def finish(span: Any, tracer: Any, outcome: Any, label: str, model: str | None, seconds: float) -> None:
    """Record the attempt's outcome on its span, and the model call as a child span."""
    span.set_attribute("sealflow.outcome", label)
    error_class = getattr(outcome, "error_class", None)
    if error_class:
        span.set_attribute("sealflow.error_class", error_class)
        span.set_status(Status(StatusCode.ERROR, error_class))
    if model is not None:
        now = trace_time_ns()
        child = tracer.start_span("sealflow.model", start_time=now - int(seconds * 1e9),
                                  attributes={"gen_ai.request.model": model,
                                              "gen_ai.usage.total_tokens": getattr(outcome, "tokens", 0) or 0,
                                              "sealflow.cost_usd": getattr(outcome, "cost_usd", 0.0) or 0.0})
        child.end(end_time=now)


def trace_time_ns() -> int:
    import time

    return time.time_ns()


def tracer(provider: Any = None) -> Any:
    """The tracer of ``provider`` (None: the global one, a no-op unless :func:`configure` installed the SDK)."""
    return (provider or trace.get_tracer_provider()).get_tracer(TRACER_NAME)


def trace_middleware() -> Any:
    """A Dramatiq middleware carrying the sender's span in each message (``options[OPTION]``) and making it the
    parent of the receiver's attempt span."""
    import threading

    import dramatiq

    class TraceMiddleware(dramatiq.Middleware):
        def before_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
            tp = current_traceparent()
            if tp is None:  # sent after the attempt's span ended: that span is the parent of its run's next step
                last = _last.get(threading.get_ident())
                if last is not None and message.args and message.args[0] == last[0]:
                    tp = last[1]
            if tp:
                message.options[OPTION] = tp

        def before_process_message(self, broker: Any, message: Any) -> None:
            _incoming[threading.get_ident()] = message.options.get(OPTION)

        def after_process_message(self, broker: Any, message: Any, *, result: Any = None,
                                  exception: Any = None) -> None:
            _incoming.pop(threading.get_ident(), None)

        after_skip_message = after_process_message

    return TraceMiddleware()


def configure(exporter: Any = None, *, service_name: str = "sealflow") -> bool:
    """Install the SDK tracer provider with ``exporter`` (None: OTLP if ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set,
    else nothing is installed and tracing stays a no-op). Returns whether a provider was installed."""
    if exporter is None:
        if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            return False
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but opentelemetry-exporter-otlp is not installed; "
                        "traces are not exported (pip install 'sealflow[otlp]')")
            return False
        exporter = OTLPSpanExporter()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    processor = BatchSpanProcessor(exporter) if type(exporter).__name__ == "OTLPSpanExporter" \
        else SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    return True
