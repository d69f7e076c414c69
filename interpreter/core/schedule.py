"""When a scheduled definition is due: cron slots in the schedule's time zone.

A definition with ``trigger.schedule: {cron, timezone, run_as}`` is submitted by
``sealflow scheduler`` once per cron *slot*. Each submission carries the idempotency key
:func:`slot_key`, so a slot is submitted once however often the scheduler restarts or
how many schedulers run on one store. A scheduler that was down does not replay every
missed slot: it submits the latest slot only if it is no older than the catch-up window.
"""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

from croniter import croniter


def _zone(name: str | None) -> ZoneInfo:
    return ZoneInfo(name or "UTC")


def latest_slot(cron: str, timezone: str | None, now: dt.datetime) -> dt.datetime:
    """The most recent slot at or before ``now`` (aware), in the schedule's time zone."""
    local = now.astimezone(_zone(timezone))
    it = croniter(cron, local + dt.timedelta(seconds=1))
    return it.get_prev(dt.datetime)


def next_slot(cron: str, timezone: str | None, now: dt.datetime) -> dt.datetime:
    """The first slot strictly after ``now``."""
    return croniter(cron, now.astimezone(_zone(timezone))).get_next(dt.datetime)


def due_slot(cron: str, timezone: str | None, now: dt.datetime, catch_up: dt.timedelta) -> dt.datetime | None:
    """The slot to submit now: the latest one, if it is no older than ``catch_up``; else None."""
    slot = latest_slot(cron, timezone, now)
    return slot if now - slot <= catch_up else None


def slot_key(name: str, version: int, slot: dt.datetime) -> str:
    """The idempotency key of one slot of one definition version (UTC, to the second)."""
    return f"schedule:{name}:v{version}:{slot.astimezone(dt.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"
