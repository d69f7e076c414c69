"""``recover`` and ``status`` when this process cannot continue a run (issue 14, no dead ends).

``sealflow recover`` used to refuse as a whole when one run in flight needed an action module this process
lacked. Now it recovers the runs it can, leaves the others as they are and names each with what it lacks and
how to provide it (exit 0). ``sealflow status`` in any process says why a due step waits: this process lacks
what it needs too."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli_dead_ends import cli, forget, project, state  # noqa: F401 - project is a fixture


@pytest.fixture
def folder(project):  # noqa: F811 - the project of test_cli_dead_ends: its definitions and action module
    return project


PLAIN = """\
sealflow: 1
name: plain
version: 1
owner: team:demo
steps:
  - id: done
    succeed: {}
"""


def submitted(capsys, *argv) -> str:
    code, out, err = cli(capsys, "submit", *argv, "--as", "user:ann")
    assert code == 0, (out, err)
    return out.strip()


def test_recover_continues_the_runs_it_can_and_leaves_the_others_as_they_were(capsys, folder):
    # Given two queued runs: one of a plain workflow, one whose first step is a custom action
    (folder / "plain.v1.yaml").write_text(PLAIN)
    plain = submitted(capsys, "plain.v1.yaml")
    gated = submitted(capsys, "hello-gated.v1.yaml", "--actions", "hello_actions.py")
    forget()
    before = state(capsys, gated)
    # When `recover` runs in a process without the action's module
    code, out, err = cli(capsys, "recover", "--as", "user:ann")
    # Then it succeeds: the plain run completed, the other is left as it was and named with what it lacks
    assert code == 0, (out, err)
    assert out.splitlines()[0] == ("recovered: 1 run(s) in flight; left 1 run(s) as they were: this process "
                                   "cannot continue them")
    assert f"{plain}: completed" in out
    assert f"{gated} (hello-gated v1): left, this process lacks:" in out
    assert "missing action 'hello.greet'" in out and "--actions MODULE" in out and "Traceback" not in out + err
    assert state(capsys, plain)["state"] == "completed"
    after = state(capsys, gated)
    assert after["state"] == before["state"] == "queued" and after["steps"] == before["steps"]
    # And --json says the same: the run driven under "runs", the one left under "left" with its lacks
    code, out, err = cli(capsys, "recover", "--as", "user:ann", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["runs"] == {} and [e["run_id"] for e in report["left"]] == [gated]
    assert report["left"] == report["report"]["runs_left"]
    assert ["action", "hello.greet"] in report["left"][0]["lacks"]
    # And with the module, `recover` continues it (to its approval gate)
    code, out, err = cli(capsys, "recover", "--as", "user:ann", "--actions", "hello_actions.py")
    assert code == 0 and out.splitlines()[0] == "recovered: 1 run(s) in flight", (out, err)
    assert f"{gated}: waiting" in out


def test_status_says_a_due_step_waits_for_a_process_that_has_what_it_needs(capsys, folder):
    # Given a queued run whose first step is a custom action, due and not claimed by anyone
    gated = submitted(capsys, "hello-gated.v1.yaml", "--actions", "hello_actions.py")
    forget()
    # When `status` reads it in a process that did not leave the step and lacks the action too
    code, out, err = cli(capsys, "status", gated)
    # Then it says why the step waits, what this process lacks and how to provide it
    assert code == 3, (out, err)
    assert "waiting at first for a process that has action 'hello.greet' (this one lacks it too):" in out
    assert "missing action 'hello.greet': load the module that defines it: --actions MODULE" in out
    # And --json carries the same wait
    waiting = state(capsys, gated)["waiting"]
    assert waiting["kind"] == "process" and waiting["step"] == "first" and waiting["left_here"] is False
    assert waiting["lacks"] == [["action", "hello.greet"]]
    # And in a process that has the action, status says nothing of the kind (it could run the step)
    code, out, err = cli(capsys, "status", gated, "--actions", "hello_actions.py", "--json")
    assert json.loads(out).get("waiting") is None, (out, err)
