"""When a scheduled definition is due: cron slots in the schedule's time zone.

A definition with ``trigger.schedule: {cron, timezone, run_as}`` is submitted by
``sealflow scheduler`` once per cron *slot*. Each submission carries the idempotency key
:func:`slot_key`, so a slot is submitted once however often the scheduler restarts or
how many schedulers run on one store. A scheduler that was down does not replay every
missed slot: it submits the latest slot only if it is no older than the catch-up window. A slot that cannot
be computed raises :class:`ScheduleError`, never croniter's or zoneinfo's own errors.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from zoneinfo import ZoneInfo

from croniter import croniter

from sealflow.core.errors import SealflowError


class ScheduleError(SealflowError):
    """A schedule's slot could not be computed (a cron or zone the tz database or croniter cannot serve here,
    a slot beyond the calendar); ``reason`` says why in words. The scheduler skips that definition."""

    def __init__(self, cron: str, timezone: str | None, reason: str):
        super().__init__(f"cron {cron!r} in time zone {timezone or 'UTC'!r}: {reason}")
        self.reason = reason


def _computed(cron: str, timezone: str | None, compute: Callable[[], dt.datetime]) -> dt.datetime:
    """``compute()``, any failure of croniter, zoneinfo or the calendar raised as :class:`ScheduleError`."""
    try:
        return compute()
    except Exception as exc:  # noqa: BLE001 - croniter's, zoneinfo's and datetime's errors alike
        text = (str(exc).strip().splitlines() or [""])[0]
        raise ScheduleError(cron, timezone, f"{type(exc).__name__}: {text}" if text else type(exc).__name__) \
            from exc


def _zone(name: str | None) -> ZoneInfo:
    return ZoneInfo(name or "UTC")


def latest_slot(cron: str, timezone: str | None, now: dt.datetime) -> dt.datetime:
    """The most recent slot at or before ``now`` (aware), in the schedule's time zone."""
    def compute() -> dt.datetime:
        local = now.astimezone(_zone(timezone))
        return croniter(cron, local + dt.timedelta(seconds=1)).get_prev(dt.datetime)

    return _computed(cron, timezone, compute)


def next_slot(cron: str, timezone: str | None, now: dt.datetime) -> dt.datetime:
    """The first slot strictly after ``now``."""
    return _computed(cron, timezone,
                     lambda: croniter(cron, now.astimezone(_zone(timezone))).get_next(dt.datetime))


def due_slot(cron: str, timezone: str | None, now: dt.datetime, catch_up: dt.timedelta) -> dt.datetime | None:
    """The slot to submit now: the latest one, if it is no older than ``catch_up``; else None."""
    slot = latest_slot(cron, timezone, now)
    return slot if now - slot <= catch_up else None


def slot_key(name: str, version: int, slot: dt.datetime) -> str:
    """The idempotency key of one slot of one definition version (UTC, to the second)."""
    return f"schedule:{name}:v{version}:{slot.astimezone(dt.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"
