"""Circuit breakers: settings, states and the transition rules (pure; the store keeps the state).

A breaker is named (a step's ``circuit_breaker: llm-provider``, or ``model:<name>`` for a configured
model provider with ``circuit_breaker:`` settings) and shared by every run and every process of a store::

    closed --(failures >= threshold within window)--> open --(cool_down elapsed)--> half_open
    half_open --(the one probe succeeds)--> closed;  half_open --(the probe fails)--> open again

*closed*: calls go through; a counted failure is added to the window (the window starts at the first
failure and restarts when it is older than ``window``). *open*: calls fail at once with error class
``circuit_open`` (``retry_after`` = the rest of the cool-down), the target is not called. *half_open*:
exactly one caller (the probe) is let through; the others get ``circuit_open``; a probe whose holder
died is given to another caller after ``probe_lease`` seconds.

Counted failures are those that say the target is unwell: ``timeout``, ``network``, ``rate_limited``,
``unavailable``, ``internal``. Any other outcome (a success, a refused request) says it answered.

Settings come from the runtime configuration (``circuit_breakers:``, by name, ``"*"`` for every
breaker not listed), else the defaults below.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from sealflow.core.errors import ConfigError

COUNTED = frozenset({"timeout", "network", "rate_limited", "unavailable", "internal"})
ANY = "*"


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclasses.dataclass(frozen=True)
class BreakerSettings:
    """Open after ``failures`` counted failures within ``window`` seconds; probe after ``cool_down``."""

    failures: int = 5
    window: float = 60.0
    cool_down: float = 30.0
    #: how long a half-open probe may take before another caller is given the probe
    probe_lease: float = 60.0


DEFAULT = BreakerSettings()


@dataclasses.dataclass(frozen=True)
class Admission:
    """The answer to "may I call the target?": ``allowed`` (``probe``: as the half-open probe), else
    refused for ``retry_after`` seconds."""

    allowed: bool
    state: str
    probe: bool = False
    retry_after: float = 0.0
    failures: int = 0


@dataclasses.dataclass(frozen=True)
class BreakerRecord:
    """One breaker as stored."""

    name: str
    state: str
    failures: int
    window_start: float | None
    opened_at: float | None
    probe_until: float | None
    last_error: str | None
    updated_at: float

    def reopens_at(self, settings: BreakerSettings) -> float | None:
        return None if self.opened_at is None or self.state == "closed" else self.opened_at + settings.cool_down


def admit(rec: BreakerRecord | None, now: float, settings: BreakerSettings) -> tuple[Admission, dict[str, Any] | None]:
    """Whether a call may go through, and the changed columns to store (None: nothing changes)."""
    if rec is None or rec.state == BreakerState.CLOSED:
        return Admission(True, "closed", failures=0 if rec is None else rec.failures), None
    if rec.state == BreakerState.OPEN:
        until = (rec.opened_at or now) + settings.cool_down
        if now < until:
            return Admission(False, "open", retry_after=until - now, failures=rec.failures), None
        return (Admission(True, "half_open", probe=True, failures=rec.failures),
                {"state": "half_open", "probe_until": now + settings.probe_lease})
    # half-open: one probe at a time; a probe whose holder vanished is handed on after its lease
    if rec.probe_until is not None and now < rec.probe_until:
        return Admission(False, "half_open", retry_after=min(settings.cool_down, rec.probe_until - now),
                         failures=rec.failures), None
    return (Admission(True, "half_open", probe=True, failures=rec.failures),
            {"state": "half_open", "probe_until": now + settings.probe_lease})


def record(rec: BreakerRecord | None, now: float, settings: BreakerSettings, *, error_class: str | None,
           probe: bool, message: str | None = None, called: bool = True) -> dict[str, Any] | None:
    """The columns to store after a call ended (``error_class`` None: it succeeded; ``called`` False: the
    target was not called after all, e.g. the step was skipped: a probe is handed back unused)."""
    failed = error_class in COUNTED
    state = "closed" if rec is None else rec.state
    if not called:
        return {"probe_until": None} if probe and state == BreakerState.HALF_OPEN else None
    if probe:
        if failed:
            return {"state": "open", "opened_at": now, "probe_until": None, "last_error": message}
        return {"state": "closed", "failures": 0, "window_start": None, "opened_at": None, "probe_until": None}
    if not failed or state != BreakerState.CLOSED:
        return None  # a success in closed keeps the window; a late result while open or half-open changes nothing
    start = None if rec is None else rec.window_start
    count = 0 if rec is None else rec.failures
    if start is None or now - start > settings.window:
        start, count = now, 0
    count += 1
    changes: dict[str, Any] = {"failures": count, "window_start": start, "last_error": message}
    if count >= settings.failures:
        changes.update(state="open", opened_at=now, probe_until=None)
    return changes


# -- settings from the runtime configuration ---------------------------------------------------------
def settings_for(name: str, extra: Mapping[str, Any] | None) -> BreakerSettings:
    """The settings of breaker ``name``: its entry in ``circuit_breakers:``, else ``"*"``, else the defaults."""
    section = (extra or {}).get("circuit_breakers") or {}
    if not isinstance(section, Mapping):
        raise ConfigError("circuit_breakers: must be a map of breaker name (or \"*\") to settings")
    spec = section.get(name, section.get(ANY))
    where = f"circuit_breakers.{name if name in section else ANY}"
    return parse_settings(spec, where) if spec is not None else DEFAULT


def check_config(extra: Mapping[str, Any] | None) -> None:
    """Parse every entry of ``circuit_breakers:`` now, so a bad one is a :class:`ConfigError` at start naming
    it, not a failure of the first step that uses it."""
    section = (extra or {}).get("circuit_breakers") or {}
    if not isinstance(section, Mapping):
        raise ConfigError("circuit_breakers: must be a map of breaker name (or \"*\") to settings")
    for name, spec in section.items():
        parse_settings(spec, f"circuit_breakers.{name}")


def parse_settings(spec: Any, where: str, base: BreakerSettings = DEFAULT) -> BreakerSettings:
    """``{failures: 5, window: 60s, cool_down: 30s, probe_lease: 60s}`` (each optional)."""
    from sealflow.dsl.durations import parse_ms

    keys = ("failures", "window", "cool_down", "probe_lease")
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where} must be a map with keys: {', '.join(keys)}")
    unknown = sorted(set(map(str, spec)) - set(keys))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(keys)}")
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if key == "failures":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{where}.failures: must be an integer >= 1, not {value!r}")
            out[key] = value
            continue
        try:
            seconds = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
                else parse_ms(str(value)) / 1000.0
        except Exception:  # noqa: BLE001 - one clear message for any unparsable duration
            seconds = -1.0
        if seconds <= 0:
            raise ConfigError(f"{where}.{key}: {value!r} is not a positive duration; write e.g. 30s or 2m")
        out[key] = seconds
    return dataclasses.replace(base, **out)
