"""`sealflow scheduler`: scheduled definitions are submitted once per slot, acting as their run_as."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sealflow.cli import main
from sealflow.runtime.honoured import refuses

# weekly-report declares concurrency: email
_REFUSED = pytest.mark.skipif(refuses("step.concurrency"), reason="refused at submit while concurrency pools "
                              "are not enforced (sealflow.runtime.honoured.NOT_YET)")

ROOT = Path(__file__).resolve().parents[2]
DEFINITIONS = ROOT / "definitions"
SLOT_TIME = "2026-11-30T07:20:00+01:00"  # twenty minutes after weekly-report's Monday 07:00 (Berlin) slot


def fire(capsys, at: str, *extra: str):
    code = main(["scheduler", str(DEFINITIONS), "--once", "--at", at, "--json", *extra])
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@_REFUSED
def test_given_a_due_slot_when_the_scheduler_fires_then_one_run_acts_as_the_schedules_identity(capsys):
    code, done = fire(capsys, SLOT_TIME)
    assert code == 0 and len(done) == 1
    [entry] = done
    assert entry["workflow"] == "weekly-report" and entry["run_as"] == "service:weekly-report"
    assert entry["state"] == "waiting"  # at its approval gate
    main(["status", entry["run_id"], "--json"])
    status = json.loads(capsys.readouterr().out)
    assert status["initiator"] == "service:sealflow-scheduler" and status["acting_as"] == "service:weekly-report"


@_REFUSED
def test_given_a_slot_already_submitted_when_the_scheduler_fires_again_then_no_second_run(capsys):
    _, first = fire(capsys, SLOT_TIME)
    _, again = fire(capsys, "2026-11-30T07:45:00+01:00")
    assert [e["run_id"] for e in again] == [e["run_id"] for e in first]


def test_given_a_slot_older_than_the_catch_up_window_when_fired_then_nothing_is_submitted(capsys):
    code, done = fire(capsys, "2026-11-30T09:30:00+01:00")
    assert code == 0 and done == []


def test_given_a_policy_without_the_service_identity_when_fired_then_the_submission_is_refused(capsys, tmp_path):
    policy = tmp_path / "access.yaml"
    policy.write_text("tenants:\n  default:\n    roles: {viewer: [metrics:read]}\n    members: {user:ana: [viewer]}\n")
    code, done = fire(capsys, SLOT_TIME, "--access", str(policy))
    assert code == 1 and "refused" in done[0] and "service:weekly-report" in done[0]["refused"]


def test_given_nothing_due_when_the_scheduler_fires_once_then_it_says_so_and_when_the_next_slot_is(capsys):
    # Given a time long after weekly-report's Monday slot (beyond the catch-up window)
    code = main(["scheduler", str(DEFINITIONS / "weekly-report.v1.yaml"), "--once", "--at",
                 "2026-12-03T12:00:00+00:00"])
    out = capsys.readouterr().out
    # Then it says nothing was due, and names the next slot
    assert code == 0
    assert "nothing was due at 2026-12-03T12:00:00+00:00; the next slot is weekly-report v1 at 2026-12-07" in out


@_REFUSED
def test_given_a_due_slot_when_the_scheduler_fires_once_in_text_then_it_says_what_it_submitted(capsys):
    main(["scheduler", str(DEFINITIONS / "weekly-report.v1.yaml"), "--once", "--at", SLOT_TIME])
    out = capsys.readouterr().out
    assert "weekly-report v1 slot 2026-11-30T" in out and ": submitted run run_" in out, out


def test_given_an_unsigned_draft_beside_a_signed_schedule_when_fired_under_trust_then_the_draft_is_ignored(
        capsys, tmp_path):
    # Given a folder holding the signed weekly-report and an unsigned definition with no schedule, and a policy
    import shutil

    folder = tmp_path / "defs"
    folder.mkdir()
    shutil.copy(DEFINITIONS / "weekly-report.v1.yaml", folder)
    shutil.copy(DEFINITIONS / "lead-qualification.v1.yaml", folder)
    assert main(["keygen", "--out", str(tmp_path / "ops")]) == 0
    assert main(["sign", str(folder / "weekly-report.v1.yaml"), "--key", str(tmp_path / "ops.pem")]) == 0
    (tmp_path / "trust.yaml").write_text(f"keys:\n  - id: ops\n    public_key: {tmp_path / 'ops.pub.pem'}\n")
    capsys.readouterr()
    # When the scheduler fires once under the trust policy, at a time nothing is due
    code = main(["scheduler", str(folder), "--once", "--at", "2026-12-03T12:00:00+00:00", "--trust",
                 str(tmp_path / "trust.yaml")])
    out, err = capsys.readouterr()
    # Then the unscheduled draft is neither verified nor refused: it says nothing was due
    assert code == 0 and "nothing was due" in out and "unsigned" not in err, out + err


# ---------------------------------------------------------------- one bad schedule never stops the scheduler

HEARTBEAT = """\
sealflow: 1
name: heartbeat
version: 1
owner: team:ops
trigger:
  schedule: {cron: "* * * * *", timezone: UTC, run_as: service:heartbeat}
steps:
  - id: beat
    set: {ok: true}
"""


def _with_weekly_report(tmp_path: Path, name: str, text: str) -> Path:
    import shutil

    folder = tmp_path / "defs"
    folder.mkdir(exist_ok=True)
    shutil.copy(DEFINITIONS / "weekly-report.v1.yaml", folder)
    (folder / name).write_text(text)
    return folder


def _lines_naming(err: str, what: str) -> list[str]:
    """The scheduler's own lines about ``what`` (not the development-mode warning every unsigned file gets)."""
    return [line for line in err.splitlines() if what in line and line.startswith("sealflow: scheduler:")]


@_REFUSED
def test_given_a_cron_that_no_longer_validates_when_the_scheduler_fires_then_it_is_skipped_and_the_other_runs(
        capsys, tmp_path):
    # Given weekly-report and, beside it, a definition whose six-field cron (a seconds field) the scheduler's
    # validation refuses: written for a release that took croniter's six fields, or edited on disk since
    weekly = (DEFINITIONS / "weekly-report.v1.yaml").read_text()
    digest = weekly.replace("name: weekly-report", "name: weekly-digest").replace('cron: "0 7 * * 1"',
                                                                                     'cron: "0 0 7 * * 1"')
    folder = _with_weekly_report(tmp_path, "weekly-digest.v1.yaml", digest)
    # When the scheduler fires at weekly-report's slot
    code = main(["scheduler", str(folder), "--once", "--at", SLOT_TIME, "--json"])
    out, err = capsys.readouterr()
    done = json.loads(out.strip().splitlines()[-1])
    # Then weekly-report's run is submitted as usual
    assert [(d["workflow"], "run_id" in d) for d in done] == [("weekly-report", True)], (out, err)
    # And the bad one is skipped with one line naming its file, where (line:column) and why, with a hint
    [line] = _lines_naming(err, "weekly-digest.v1.yaml")
    assert line.startswith("sealflow: scheduler: skipped ") and "(invalid_schedule)" in line
    assert "weekly-digest.v1.yaml:30:" in line and "error[S209]" in line and "has 6 fields" in line
    assert "hint: five fields" in line
    assert "internal error" not in err and "Traceback" not in err
    # And the round says something was skipped (exit 1), as it does for a refused submission
    assert code == 1


def test_given_a_cron_that_validates_when_its_next_slot_cannot_be_computed_then_it_is_skipped_and_the_other_is_named(
        capsys, tmp_path):
    # Given weekly-report (valid) and an every-minute heartbeat, on the last day the calendar holds
    folder = _with_weekly_report(tmp_path, "heartbeat.v1.yaml", HEARTBEAT)
    # When the scheduler fires once when nothing is due (the heartbeat's last slot is older than the catch-up)
    # and looks for the next slots: weekly-report's would fall in the year 10000
    code = main(["scheduler", str(folder), "--once", "--at", "9999-12-31T12:00:30+00:00", "--catch-up", "10"])
    out, err = capsys.readouterr()
    # Then weekly-report is skipped with one line naming its file and the reason, never an internal error
    [line] = _lines_naming(err, "weekly-report.v1.yaml")
    assert "skipped" in line and "(slot_failed)" in line and "its next slot cannot be computed" in line
    assert "out of range" in line and "the others are still scheduled" in line
    assert "internal error" not in err and "Traceback" not in err
    # And the heartbeat's next slot is still named
    assert "the next slot is heartbeat v1 at 9999-12-31T12:01:00+00:00" in out
    assert code == 1


def test_given_a_running_scheduler_when_one_definitions_slot_fails_then_it_is_skipped_once_counted_and_the_others_go_on(
        capsys, tmp_path):
    import datetime as dt

    from sealflow.cli.commands import scheduler
    from sealflow.runtime.facade import Runtime

    # Given a scheduler's loop over the heartbeat and weekly-report, on a runtime with its metrics
    folder = _with_weekly_report(tmp_path, "heartbeat.v1.yaml", HEARTBEAT)
    schedules = scheduler._load((str(folder),), (), None)
    rt = Runtime(f"sqlite:///{tmp_path / 'sched.db'}")
    schedules.count_on(rt.telemetry.metrics)
    capsys.readouterr()
    ticks = iter([dt.datetime(9999, 12, 31, 12, 0, tzinfo=dt.UTC), dt.datetime(9999, 12, 31, 12, 1, tzinfo=dt.UTC)])

    class TwoTicks:
        """Stops the loop after its second sleep; records how long each would have been."""

        def __init__(self):
            self.waits: list[float] = []

        def is_set(self) -> bool:
            return len(self.waits) >= 2

        def wait(self, seconds: float) -> None:
            self.waits.append(seconds)

    stop = TwoTicks()
    # When it runs two ticks, a minute apart, on the calendar's last day (weekly-report's next slot cannot be had)
    try:
        code = scheduler.serve(rt, schedules, stop, tenant="default", catch_up=dt.timedelta(minutes=5), drive=True,
                               as_json=True, now=lambda: next(ticks))
        exposition = rt.telemetry.metrics.exposition().decode()
    finally:
        rt.close()
    out, err = capsys.readouterr()
    # Then the heartbeat was submitted and ran at both ticks, and the loop slept until its next slot each time
    rounds = [json.loads(line) for line in out.strip().splitlines()]
    assert [[(d["workflow"], d["state"]) for d in r] for r in rounds] == [[("heartbeat", "completed")]] * 2
    assert stop.waits == [60.0, 60.0] and code == 0
    # And weekly-report was skipped once: one line, counted once with its reason
    assert len(_lines_naming(err, "weekly-report.v1.yaml")) == 1
    assert 'sealflow_schedule_errors_total{reason="slot_failed"} 1.0' in exposition
    assert [e.path for e in schedules.entries] == [str(folder / "heartbeat.v1.yaml")]
