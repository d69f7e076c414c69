"""Redaction: secret values seen in this process, blanked out of text, JSON-like values and log records.

The lowest layer holds it because every layer writes text that may carry a secret: the store's audit
chain (:mod:`sealflow.interpreter.store.auditchain`), the engine's commits
(:func:`sealflow.interpreter.execution.secrets.redact_commit`) and the logs. Secret providers
(:mod:`sealflow.interpreter.execution.secrets`) remember each value they resolve in :data:`REDACTOR`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from typing import Any

MIN_REDACT_LENGTH = 4


class Redactor:
    """Remembers secret values seen in this process and blanks them out of text and JSON-like values."""

    def __init__(self) -> None:
        self._values: dict[str, str] = {}
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None

    @property
    def active(self) -> bool:
        return self._pattern is not None

    def remember(self, name: str, value: str) -> None:
        if not isinstance(value, str) or len(value) < MIN_REDACT_LENGTH or self._values.get(value) == name:
            return
        with self._lock:
            self._values[value] = name
            # longest first, so a secret containing another is replaced whole
            ordered = sorted(self._values, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(v) for v in ordered))
        install_log_filter()

    def forget_all(self) -> None:
        with self._lock:
            self._values.clear()
            self._pattern = None

    def text(self, value: str | None) -> str | None:
        pattern = self._pattern
        if pattern is None or not value:
            return value
        values = self._values
        redacted: str = pattern.sub(lambda m: f"[redacted:{values.get(m.group(0), 'secret')}]", value)
        return redacted

    def value(self, value: Any) -> Any:
        """``value`` with every string inside redacted (maps, lists, tuples walked)."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.value(v) for v in value)
        return value

    def contains(self, text: str | None) -> bool:
        return bool(self._pattern is not None and text and self._pattern.search(text))


#: the process-wide redactor every resolved secret is remembered by
REDACTOR = Redactor()


class RedactingFilter(logging.Filter):
    """Blanks remembered secret values out of a log record (message, arguments and traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        red = REDACTOR
        if not red.active:
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string is the handler's problem, not ours
            return True
        if red.contains(message):
            record.msg, record.args = red.text(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text and red.contains(record.exc_text):
            record.exc_text = red.text(record.exc_text)
        if record.exc_info and record.exc_info[1] is not None and red.contains(str(record.exc_info[1])):
            # handlers that format the exception again see only the redacted text
            record.exc_info = None
        return True


_FILTER = RedactingFilter()
#: loggers filtered even before anything logged through them
KNOWN_LOGGERS = ("sealflow", "sealflow.action", "sealflow.engine", "sealflow.actors", "sealflow.timeouts",
                 "sealflow.recovery", "sealflow.runtime", "sealflow.compensation")


def install_log_filter() -> None:
    """Attach :class:`RedactingFilter` to the ``sealflow`` logger and every ``sealflow.*`` logger known now.

    (A logger's filters do not apply to records of its children, so each gets it.) Called when a
    secret is first remembered and when a runtime starts.
    """
    manager = logging.Logger.manager
    names = list(KNOWN_LOGGERS) + [n for n in list(manager.loggerDict) if n.startswith("sealflow.")]
    for name in names:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
