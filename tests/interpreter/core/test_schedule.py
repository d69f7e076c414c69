"""Cron slots of scheduled definitions, in the schedule's time zone."""

from __future__ import annotations

import datetime as dt

import pytest

from sealflow.core.schedule import ScheduleError, due_slot, latest_slot, next_slot, slot_key

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


def test_given_a_slot_past_the_end_of_the_calendar_when_the_next_one_is_computed_then_a_schedule_error_says_why():
    # Given a weekly cron that validates, asked on the last day the calendar holds
    # When the next slot is computed (it would fall in the year 10000)
    with pytest.raises(ScheduleError) as raised:
        next_slot(BERLIN_MONDAY_7, "Europe/Berlin", t("9999-12-31T12:00:00+00:00"))
    # Then the error names the cron and the zone and says why, in place of croniter's or datetime's own error
    assert "'0 7 * * 1'" in str(raised.value) and "'Europe/Berlin'" in str(raised.value)
    assert "out of range" in raised.value.reason


@pytest.mark.parametrize("zone", ["America", "Europe/" + "A" * 293])
def test_given_a_zone_the_tz_database_cannot_serve_when_a_slot_is_computed_then_a_schedule_error(zone):
    # Given a time zone that is not a zone (a folder of the tz database, a name the file system refuses)
    # When the latest slot is computed (a plan that bypassed validation, or a tz database changed under it)
    # Then it is a ScheduleError, not IsADirectoryError or OSError
    with pytest.raises(ScheduleError):
        due_slot("0 7 * * *", zone, t("2026-06-01T12:00:00+00:00"), dt.timedelta(hours=1))
