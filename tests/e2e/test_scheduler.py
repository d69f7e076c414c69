"""`sealflow scheduler`: scheduled definitions are submitted once per slot, acting as their run_as."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sealflow.cli import main
from sealflow.interpreter.service.honoured import refuses

# weekly-report declares concurrency: email
_REFUSED = pytest.mark.skipif(refuses("step.concurrency"), reason="refused at submit while concurrency pools "
                              "are not enforced (sealflow.interpreter.service.honoured.NOT_YET)")

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
