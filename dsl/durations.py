"""Durations as written in definitions: ``500ms``, ``30s``, ``15m``, ``24h``, ``7d``."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^([0-9]{1,12})(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

SECOND = 1000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR


class DurationError(ValueError):
    """A string that is not a duration."""


def parse_ms(text: str) -> int:
    """Milliseconds in ``text``; raise :class:`DurationError` with a hint if malformed."""
    if not isinstance(text, str):
        raise DurationError(f"{text!r} is not a duration: write a string like 500ms, 30s, 15m, 24h or 7d")
    m = _DURATION.match(text.strip())
    if not m:
        raise DurationError(f"{text!r} is not a duration: write a number and a unit, like 500ms, 30s, 15m, 24h or 7d")
    return int(m.group(1)) * _UNIT_MS[m.group(2)]


def format_ms(ms: int) -> str:
    """The shortest exact duration string for ``ms``."""
    for unit in ("d", "h", "m", "s"):
        size = _UNIT_MS[unit]
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
