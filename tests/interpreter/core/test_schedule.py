"""Cron slots of scheduled definitions, in the schedule's time zone."""

from __future__ import annotations

import datetime as dt

from sealflow.interpreter.core.schedule import due_slot, latest_slot, next_slot, slot_key

BERLIN_MONDAY_7 = "0 7 * * 1"


def t(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def test_given_a_time_after_a_slot_when_asked_then_the_latest_slot_is_in_the_schedules_zone():
    slot = latest_slot(BERLIN_MONDAY_7, "Europe/Berlin", t("2026-11-30T08:00:00+00:00"))
    assert slot == t("2026-11-30T07:00:00+01:00")


def test_given_the_exact_slot_time_when_asked_then_that_slot_is_due():
    assert latest_slot(BERLIN_MONDAY_7, "Europe/Berlin", t("2026-11-30T07:00:00+01:00")) == \
        t("2026-11-30T07:00:00+01:00")


def test_given_a_missed_slot_when_it_is_older_than_the_catch_up_then_it_is_not_replayed():
    window = dt.timedelta(hours=1)
    assert due_slot(BERLIN_MONDAY_7, "Europe/Berlin", t("2026-11-30T07:30:00+01:00"), window) is not None
    assert due_slot(BERLIN_MONDAY_7, "Europe/Berlin", t("2026-11-30T09:30:00+01:00"), window) is None


def test_given_summer_time_when_the_next_slot_is_computed_then_the_local_hour_holds():
    assert next_slot("0 7 * * *", "Europe/Berlin", t("2026-06-01T12:00:00+00:00")) == t("2026-06-02T07:00:00+02:00")


def test_a_slot_key_is_the_same_for_the_same_instant_in_any_zone():
    a = slot_key("weekly-report", 1, t("2026-11-30T07:00:00+01:00"))
    b = slot_key("weekly-report", 1, t("2026-11-30T06:00:00+00:00"))
    assert a == b == "schedule:weekly-report:v1:2026-11-30T06:00:00Z"
    assert slot_key("weekly-report", 2, t("2026-11-30T06:00:00+00:00")) != a
