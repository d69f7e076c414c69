"""Telemetry of the runtime: Prometheus metrics (:mod:`.metrics`), OpenTelemetry traces (:mod:`.tracing`) and
structured JSON logs (:mod:`.logging`). docs/operations.md describes what is exported and how to scrape it."""

from __future__ import annotations

from typing import Any


def install(runtime: Any, *, tracer_provider: Any = None) -> Any:
    """The telemetry of ``runtime`` (being built: its store, broker, queues, capabilities and clock are set): a
    :class:`~.metrics.Metrics` registry (store and broker state read at scrape time) in the engine middleware
    :class:`~.hooks.Telemetry` (returned: ``runtime.telemetry``, which the runtime puts first in its engine's
    configuration), and the broker middleware that carries a step's span to the next step's message."""
    from sealflow.runtime.telemetry import tracing
    from sealflow.runtime.telemetry.hooks import Telemetry
    from sealflow.runtime.telemetry.metrics import Metrics

    metrics = Metrics(runtime.store, runtime.broker, runtime.queue_names, capabilities=runtime.capabilities,
                      now=runtime.clock.now)
    hooks = Telemetry(metrics, runtime.store, clock=runtime.clock, tracer_provider=tracer_provider)
    if not any(type(m).__name__ == "TraceMiddleware" for m in runtime.broker.middleware):
        runtime.broker.add_middleware(tracing.trace_middleware())
    return hooks
