"""``sealflow recover`` when one run's stored plan is not what its digest says (a tampered ``plans`` row,
issue 31).

Before, one such run made ``recover`` fail as a whole (exit 1: every other run stayed where it was). Now it
recovers the others and lists the tampered run, refused into the dead-letter list, with the reason and what to
do (exit 0, as for a run it leaves). ``runs list`` and ``dlq show`` then read it as any run. Never a
traceback."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from sealflow.cli import main

PLAIN = """\
sealflow: 1
name: plain
version: 1
owner: team:demo
steps:
  - id: done
    succeed: {}
"""

OTHER = """\
sealflow: 1
name: other
version: 1
owner: team:demo
steps:
  - id: x
    set: {a: "1"}
  - id: done
    succeed: {}
"""


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err, (out, err)
    return code, out, err


@pytest.fixture
def two_runs(tmp_path, monkeypatch, capsys):
    """Two queued runs, ``plain`` and ``other``; the plans row of ``other`` rewritten in the store's file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain.v1.yaml").write_text(PLAIN)
    (tmp_path / "other.v1.yaml").write_text(OTHER)
    ids = []
    for name in ("plain", "other"):
        code, out, err = cli(capsys, "submit", f"{name}.v1.yaml", "--as", "user:ann")
        assert code == 0, err
        ids.append(out.strip())
    path = os.environ["SEALFLOW_STORE"].removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE plans SET body = replace(body, '\"a\": \"1\"', '\"a\": \"2\"') WHERE workflow = 'other'")
    return ids


def test_given_one_run_s_plan_tampered_when_recover_runs_then_the_other_completes_and_it_is_refused_and_listed(
        capsys, two_runs):
    plain, other = two_runs
    # When an operator recovers
    code, out, err = cli(capsys, "recover", "--as", "user:ann")
    # Then it succeeds: the plain run completed, the tampered one was refused (failed, dead-lettered) and is
    # listed with the reason and what to do
    assert code == 0, (out, err)
    assert out.splitlines()[0] == "recovered: 1 run(s) in flight", out
    assert f"  {plain}: completed" in out
    assert ("refused 1 run(s): the stored plan does not match its digest, so they are not executed" in out)
    assert f"  {other} (other v1): refused, failed: the stored plan sha256:" in out
    assert "restore that row of the store's plans table from a backup" in out
    assert f"`sealflow dlq redrive {other}`" in out
    # And the run is in the dead-letter list with the reason
    code, out, err = cli(capsys, "dlq", "show", other)
    assert code == 0 and "[tampered]" in out, (out, err)
    code, out, err = cli(capsys, "runs", "list")
    assert code == 0 and f"{other}  other v1   failed" in out and f"{plain}  plain v1   completed" in out, out


def test_given_one_run_s_plan_tampered_when_recover_runs_with_json_then_it_is_under_refused(capsys, two_runs):
    plain, other = two_runs
    code, out, err = cli(capsys, "recover", "--as", "user:ann", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["runs"] == {plain: "completed"} and report["left"] == []
    [refused] = report["refused"]
    assert (refused["run_id"], refused["workflow"], refused["state"]) == (other, "other", "failed")
    assert "does not match its digest" in refused["reason"]
    assert report["report"]["runs_refused"] == report["refused"]
