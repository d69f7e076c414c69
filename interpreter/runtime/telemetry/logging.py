"""Structured JSON logs (``--log-format json``): one JSON object a line with the time, level, logger and
message, and the ``run_id``, ``step_id``, ``attempt`` and ``trace_id`` of the step attempt the line was
logged in (set by the engine's telemetry hook through :func:`attempt_context`)."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

_CONTEXT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("sealflow_log_context",
                                                                                 default=None)
FIELDS = ("run_id", "step_id", "attempt", "trace_id", "span_id")


@contextlib.contextmanager
def attempt_context(**fields: Any) -> Iterator[None]:
    """Every line logged inside carries ``fields`` (run_id, step_id, attempt, trace_id, ...)."""
    token = _CONTEXT.set({**(_CONTEXT.get() or {}), **fields})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def current() -> dict[str, Any]:
    return dict(_CONTEXT.get() or {})


class JsonFormatter(logging.Formatter):
    """A log record as one JSON object (UTC time in RFC 3339, exception text under ``exc``)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        line.update(current())
        for name in FIELDS:  # explicit extra={...} wins over the context
            if hasattr(record, name):
                line[name] = getattr(record, name)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, separators=(",", ":"))


def _without_outsiders_tracebacks(record: logging.LogRecord) -> bool:
    """Dramatiq's consumer logs a message naming an actor this worker does not have (forged, or another
    application's on the same queue) and one it cannot decode with a traceback of its own code; its line says
    what happened, so the line is kept with the error's own words (bounded) and the traceback dropped."""
    if record.exc_info and record.name.startswith("dramatiq."):
        from dramatiq.errors import ActorNotFound, DecodeError

        exc = record.exc_info[1]
        if isinstance(exc, (ActorNotFound, DecodeError)):
            why = str(exc.__cause__ or exc)
            record.msg, record.args = f"{record.getMessage()} ({why[:200]}{'...' if len(why) > 200 else ''})", None
            record.exc_info, record.exc_text = None, None
    return True


def setup(log_format: str = "text", stream: Any = None, level: int = logging.INFO) -> logging.Handler:
    """Log to ``stream`` (stderr) in ``text`` or ``json``; returns the handler installed on the root logger."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_without_outsiders_tracebacks)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("dramatiq").setLevel(logging.WARNING)
    # the connection pool says "connection given" and "returning connection" at INFO for every store operation
    logging.getLogger("psycopg.pool").setLevel(logging.WARNING)
    return handler
