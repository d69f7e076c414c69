"""What is wrong with a schedule's ``cron`` or ``timezone``, in words (None: nothing).

The schema's format checker (:mod:`sealflow.dsl.schema`) reports these as S209 at the value, and the
scheduler (``sealflow scheduler``) asks the same questions of what it loads, so a schedule is never
accepted by one and refused by the other.

A cron has **five** fields (minute, hour, day of month, month, day of week) or is one of croniter's
``@hourly``-style macros; croniter would also take a sixth (seconds) and a seventh (year) field, which
the language does not (a seconds field fires the workflow 60 times more often than it reads, and a year
field makes a schedule that stops). A cron no date matches (``0 0 31 2 *``, February 31st) never fires:
refused. A time zone is a zone of the tz database: a folder of it (``America``), a path
(``../../etc/passwd``), an over-long name, or the machine's own ``localtime`` are not.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo

#: croniter's macros (a macro stands for five fields)
MACROS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
#: the longest name in the tz database is about 30 characters; a name past this is not one
ZONE_NAME_MAX = 64
#: names found in a tz folder that are not zones: the machine's own zone, and the POSIX default rules
_NOT_ZONES = frozenset({"localtime", "posixrules"})
#: any date: a five-field cron that fires at all fires within every 8 years (29 February), and croniter
#: looks 50 years ahead; a fixed start keeps the answer the same whenever it is asked
_FROM = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


def cron_problem(cron: str) -> str | None:
    """Why ``cron`` is not a cron expression the language accepts (None: it is one)."""
    from croniter import croniter

    text = cron.strip()
    if text.startswith("@"):
        return None if text.lower() in MACROS else (
            f"{text.split()[0]!r} is not a cron macro (known: {', '.join(sorted(MACROS))})")
    fields = text.split()
    if len(fields) != len(FIELDS):
        extra = " (no seconds or year field)" if len(fields) > len(FIELDS) else ""
        return f"has {len(fields)} field{'' if len(fields) == 1 else 's'}; a cron has five{extra}"
    try:
        croniter.expand(text)
    except Exception:  # noqa: BLE001 - croniter's errors (and any other) say the expression is bad
        return "is not a valid cron expression"
    try:
        croniter(text, _FROM).get_next(dt.datetime)
    except Exception:  # noqa: BLE001 - CroniterBadDateError: no date within croniter's search matches
        return "never fires: no date matches its day-of-month and month"
    return None


def timezone_problem(name: str) -> str | None:
    """Why ``name`` is not a time zone of the tz database (None: it is one, or there is no tz database here
    to tell)."""
    if not name or len(name) > ZONE_NAME_MAX or name in _NOT_ZONES:
        return "is not an IANA time zone"
    try:
        zoneinfo.ZoneInfo(name)
    except Exception:  # noqa: BLE001 - not found, a path, a folder (America), a name the file system refuses
        if not zoneinfo.available_timezones():  # no tz database on this machine: cannot tell
            return None
        return "is not an IANA time zone"
    return None

