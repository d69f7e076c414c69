"""The engine middleware of telemetry (``runtime.telemetry``, first in the engine's hooks): one object joining
metrics, the attempt's span and the log context, so the engine knows nothing of Prometheus or OpenTelemetry. An
observer: a hook of it that fails is logged and never fails a step (sealflow.engine.hooks)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from sealflow.engine.hooks import EngineHooks
from sealflow.runtime.telemetry import logging as jsonlog
from sealflow.runtime.telemetry import tracing
from sealflow.runtime.telemetry.metrics import Metrics, model_of, outcome_label

log = logging.getLogger("sealflow.telemetry")


class Telemetry(EngineHooks):
    """The hooks of one runtime: :attr:`metrics` (its Prometheus registry) and the tracer spans go to."""

    name = "telemetry"

    def __init__(self, metrics: Metrics, store: Any, *, clock: Any = None, tracer_provider: Any = None):
        self.metrics = metrics
        self.store = store
        self.now: Callable[[], float] = clock.now if clock is not None else time.time
        self.tracer = tracing.tracer(tracer_provider)
        self._provider = tracer_provider
        #: whether spans can be recorded, and until when that answer holds: once they can, they always can (a
        #: global provider is set once); while they cannot, it is asked again every second, so an SDK
        #: installed later (tracing.configure) is taken up within a second
        self._records, self._records_until = False, 0.0

    def around_attempt(self, x: Any, refused: Any, began: float, run: Callable[[], tuple[Any, Any]]) -> Any:
        """Run one claimed attempt (``run`` executes and commits it) inside its span and log context; count
        it. Returns what ``run`` returns. Where no span can be recorded (no SDK installed), no
        span is started: the log context and the next message's parent are those the no-op span would give."""
        if not self._recording():
            ids = tracing.untraced_ids(x.run.id)
            if ids is not None:
                with jsonlog.attempt_context(run_id=x.run.id, step_id=x.step_id, attempt=x.attempt.attempt,
                                             trace_id=ids[0], span_id=ids[1]):
                    got = run()
                    self._counted(x, got[0], refused, began)
                return got
        with tracing.attempt_span(x, self.tracer) as span:
            sc = span.get_span_context()
            context: dict[str, Any] = {"run_id": x.run.id, "step_id": x.step_id, "attempt": x.attempt.attempt}
            if sc.is_valid:
                context.update(trace_id=format(sc.trace_id, "032x"), span_id=format(sc.span_id, "016x"))
            with jsonlog.attempt_context(**context):
                got = run()
                outcome = got[0]
                seconds = self._counted(x, outcome, refused, began)
                try:
                    tracing.finish(span, self.tracer, outcome, outcome_label(outcome),
                                   model_of(x.step) if refused is None else None, seconds)
                except Exception:  # noqa: BLE001 - telemetry must never fail a step
                    log.debug("tracing: attempt not recorded", exc_info=True)
        return got

    def _counted(self, x: Any, outcome: Any, refused: Any, began: float) -> float:
        """Count the attempt that ended (metrics, a debug line); return how long it took (seconds)."""
        seconds = time.monotonic() - began
        self.metrics.attempt_done(x, outcome, refused, seconds)
        log.debug("step attempt %s", outcome_label(outcome))
        return seconds

    def _recording(self) -> bool:
        if not self._records and time.monotonic() >= self._records_until:
            self._records = tracing.records(self.tracer, self._provider)
            self._records_until = time.monotonic() + 1.0
        return self._records

    def claim_refused(self, reason: str) -> None:
        self.metrics.refused(reason)

    def claim_deferred(self, exc: Any) -> None:
        self.metrics.deferred(exc)

    def run_ended(self, run_id: str, state: str, created_at: float | None = None) -> None:
        """A run reached a final state (``created_at``: when it was submitted, if the caller has it at hand)."""
        try:
            if created_at is None:
                created_at = self.store.get_run(run_id).created_at
            self.metrics.run_done(state, created_at, self.now())
        except Exception:  # noqa: BLE001
            log.debug("metrics: run %s not recorded", run_id, exc_info=True)
