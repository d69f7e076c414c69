"""Redaction: secret values seen in this process, blanked out of text, JSON-like values and log records.

The lowest layer holds it because every layer writes text that may carry a secret: the store's audit
chain (:mod:`sealflow.store.auditchain`), the engine's commits
(:func:`sealflow.execution.secrets.redact_commit`) and the logs. Secret providers
(:mod:`sealflow.execution.secrets`) remember each value they resolve in :data:`REDACTOR`.

A secret is matched in every form it takes once written down (:func:`forms`): as is, JSON-escaped (a
``"``, a ``\\`` or the newlines of a PEM key become ``\\"``, ``\\\\``, ``\\n``; escaped twice when JSON
text is itself a string of JSON), ``repr``-escaped (a message built with ``{value!r}``) and base64-encoded
(standard and URL-safe alphabets, padded or not). Structured values are redacted leaf by leaf
(:meth:`Redactor.value`) before they become JSON; :meth:`Redactor.text` over the JSON text is the final
pass.

Log records are redacted as they are made (:func:`install_log_filter` installs a record factory once the
first secret is known), whichever logger made them: the runtime's, an action's own ``logging.getLogger(...)``,
a library's. What a process prints is the business of :mod:`sealflow.core.redacted_output`.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, overload

from sealflow.core.jsonc import dumps

MIN_REDACT_LENGTH = 4


def forms(value: str) -> set[str]:
    """Every form ``value`` takes in text: raw, JSON-escaped (ASCII-only or not, once and twice),
    ``repr``-escaped, and base64 of its UTF-8 bytes (standard and URL-safe, with and without padding)."""
    out = {value}
    for ascii_only in (False, True):
        once = json.dumps(value, ensure_ascii=ascii_only)[1:-1]
        out.add(once)
        out.add(json.dumps(once, ensure_ascii=ascii_only)[1:-1])
    out.add(repr(value)[1:-1])
    raw = value.encode("utf-8", "surrogatepass")
    for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        text = encoded.decode("ascii")
        out.update((text, text.rstrip("=")))
    return {f for f in out if len(f) >= MIN_REDACT_LENGTH}


class Redactor:
    """Remembers secret values seen in this process and blanks them out of text and JSON-like values."""

    def __init__(self) -> None:
        self._values: dict[str, str] = {}
        #: every form of every value (:func:`forms`) -> the secret's name
        self._forms: dict[str, str] = {}
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None
        #: called (outside the lock) after each value is remembered: what guards output (redacted_output)
        self.listeners: list[Callable[[], None]] = []

    @property
    def active(self) -> bool:
        return self._pattern is not None

    def remember(self, name: str, value: str) -> None:
        if not isinstance(value, str) or len(value) < MIN_REDACT_LENGTH or self._values.get(value) == name:
            return
        with self._lock:
            self._values[value] = name
            for form in forms(value):
                self._forms[form] = name
            # longest first, so a secret containing another is replaced whole
            ordered = sorted(self._forms, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(v) for v in ordered))
        install_log_filter()
        for listener in list(self.listeners):
            listener()

    def forms(self) -> list[str]:
        """Every form of every remembered value (:func:`forms`), longest first."""
        with self._lock:
            return sorted(self._forms, key=len, reverse=True)

    def forget_all(self) -> None:
        with self._lock:
            self._values.clear()
            self._forms.clear()
            self._pattern = None

    @overload
    def text(self, value: str) -> str: ...

    @overload
    def text(self, value: None) -> None: ...

    @overload
    def text(self, value: str | None) -> str | None: ...

    def text(self, value: str | None) -> str | None:
        pattern = self._pattern
        if pattern is None or not value or not pattern.search(value):
            return value  # the very same object: callers tell "nothing to redact" by identity
        names = self._forms
        redacted: str = pattern.sub(lambda m: f"[redacted:{names.get(m.group(0), 'secret')}]", value)
        return redacted

    def value(self, value: Any) -> Any:
        """``value`` with every string inside redacted (maps, their keys, lists, tuples walked); the very
        same object when nothing in it needed redacting."""
        pattern = self._pattern
        if pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value) if pattern.search(value) else value
        if isinstance(value, Mapping):
            items = [(self.value(k), self.value(v)) for k, v in value.items()]
            if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
                return value
            return dict(items)
        if isinstance(value, (list, tuple)):
            walked = [self.value(v) for v in value]
            if all(v is v0 for v, v0 in zip(walked, value, strict=True)):
                return value
            return type(value)(walked)
        return value

    @overload
    def json_text(self, text: str) -> str: ...

    @overload
    def json_text(self, text: None) -> None: ...

    @overload
    def json_text(self, text: str | None) -> str | None: ...

    def json_text(self, text: str | None) -> str | None:
        """JSON ``text`` (as :func:`~sealflow.core.jsonc.dumps` writes it) with secrets redacted
        in every string leaf, written again, then :meth:`text` over the result; text that is not JSON
        gets :meth:`text` alone."""
        if not self.contains(text):
            return text
        try:
            again = dumps(self.value(json.loads(text)))  # type: ignore[arg-type]
        except (ValueError, TypeError, RecursionError):
            return self.text(text)
        return self.text(again)

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
        if record.stack_info and red.contains(record.stack_info):
            record.stack_info = red.text(record.stack_info)
        return True


_FILTER = RedactingFilter()
#: loggers filtered even before anything logged through them
KNOWN_LOGGERS = ("sealflow", "sealflow.action", "sealflow.engine", "sealflow.actors", "sealflow.timeouts",
                 "sealflow.recovery", "sealflow.runtime", "sealflow.compensation")


_FACTORY: dict[str, Any] = {}
_FACTORY_LOCK = threading.Lock()


def _redacting_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record: logging.LogRecord = _FACTORY["previous"](*args, **kwargs)
    if REDACTOR.active:  # (one attribute read per record until a secret is known)
        _FILTER.filter(record)
    return record


def install_log_filter() -> None:
    """Redact every log record of this process as it is made: a record factory (``logging.setLogRecordFactory``,
    chained to the one in place, installed once) covers every logger, its handlers and the handlers added later
    (an action's own ``logging.getLogger(...)`` included); and, as before, :class:`RedactingFilter` on the
    ``sealflow`` logger and every ``sealflow.*`` logger known now (a logger's filters do not apply to records
    of its children, so each gets it). Called when a secret is first remembered and when a runtime starts.
    """
    with _FACTORY_LOCK:
        if "previous" not in _FACTORY:
            _FACTORY["previous"] = logging.getLogRecordFactory()
            logging.setLogRecordFactory(_redacting_record)
    manager = logging.Logger.manager
    names = list(KNOWN_LOGGERS) + [n for n in list(manager.loggerDict) if n.startswith("sealflow.")]
    for name in names:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
