"""No dead ends (issue 14): a process that cannot execute a run's next step refuses *before* changing anything.

Approving a run that uses a custom action in a process without that action's module used to consume the
approval, fail the next step with ``configuration: unknown action`` and dead-letter the run. Now ``approve``,
``reject`` and ``dlq redrive`` refuse (exit 1), say what is missing and how to provide it, and leave
the run as it was; with the module, the same command then goes through. ``cancel`` runs no action, so it is
accepted anyway: a compensation it starts waits for a process that has the undo action. ``recover`` leaves
such a run as it is and recovers the others (tests/cli/test_cli_recover_left.py)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from sealflow.cli import main
from sealflow.execution.actions import REGISTRY

ACTIONS = '''
import os

from sealflow import StepError, action


@action("hello.greet", effect="write")
def greet(ctx, name: str) -> dict:
    return {"greeting": f"hello, {name}"}


@action("hello.flaky", effect="write")
def flaky(ctx) -> dict:
    if not os.path.exists("fixed"):
        raise StepError("invalid_request", "not fixed yet")
    return {}


@action("hello.undo", effect="write")
def undo(ctx) -> dict:
    return {}
'''

DEFINITION = """\
sealflow: 1
name: hello-gated
version: 1
owner: team:demo
steps:
  - id: first
    action: hello.greet
    with: {name: first}
    compensate: {action: hello.undo}
  - id: ask
    approval: {approvers: [user:ben], timeout: 1h}
  - id: greet
    action: hello.greet
    with: {name: world}
  - id: done
    succeed: {}
"""

FLAKY = """\
sealflow: 1
name: hello-flaky
version: 1
owner: team:demo
steps:
  - id: flaky
    action: hello.flaky
    retry: {max_attempts: 1}
  - id: done
    succeed: {}
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A definition with a custom action, and its action module as a file; forgotten again after the test."""
    (tmp_path / "hello_actions.py").write_text(textwrap.dedent(ACTIONS))
    (tmp_path / "hello-gated.v1.yaml").write_text(DEFINITION)
    (tmp_path / "hello-flaky.v1.yaml").write_text(FLAKY)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    forget()


def forget() -> None:
    """This process no longer has the custom actions (as a new process without --actions would)."""
    for name in ("hello.greet", "hello.undo", "hello.flaky"):
        REGISTRY._actions.pop(name, None)
    for mod in [m for m in sys.modules if m.startswith("sealflow_actions_") and "hello_actions" in m]:
        del sys.modules[mod]


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def waiting_run(capsys) -> str:
    code, out, err = cli(capsys, "run", "hello-gated.v1.yaml", "--actions", "hello_actions.py", "--json", "--as",
                         "user:ann")
    assert code == 3, (out, err)
    forget()
    return json.loads(out)["run_id"]


def state(capsys, run_id: str) -> dict:
    code, out, err = cli(capsys, "status", run_id, "--json")
    assert code in (0, 1, 3), err
    return json.loads(out)


def assert_refused_unchanged(capsys, run_id: str, before: dict, code: int, err: str,
                             action: str = "hello.greet") -> None:
    assert code == 1, err
    assert "nothing was changed" in err and f"missing action {action!r}" in err and "--actions MODULE" in err
    assert "Traceback" not in err
    after = state(capsys, run_id)
    assert after["state"] == before["state"] and after["steps"] == before["steps"]


def test_approve_without_the_action_module_refuses_and_keeps_the_approval_open(capsys, project):
    # Given a run waiting for user:ben, whose next step is a custom action
    run_id = waiting_run(capsys)
    before = state(capsys, run_id)
    # When user:ben approves in a process without the action's module
    code, out, err = cli(capsys, "approve", run_id, "--as", "user:ben")
    # Then it is refused, nothing changed: the gate still waits, not dead-lettered
    assert_refused_unchanged(capsys, run_id, before, code, err)
    assert before["state"] == "waiting"
    # And with the module, the same approval goes through and the run completes
    code, out, err = cli(capsys, "approve", run_id, "--as", "user:ben", "--actions", "hello_actions.py", "--json")
    assert code == 0 and json.loads(out)["state"] == "completed", (out, err)


def test_rejecting_a_run_without_its_actions_refuses_before_changing_it(capsys, project):
    # Given a waiting run whose steps (or compensation) need a custom action
    run_id = waiting_run(capsys)
    before = state(capsys, run_id)
    # When a rejection, which would continue it, runs in a process without the action's module
    code, out, err = cli(capsys, "reject", run_id, "--as", "user:ben", "--reason", "no")
    # Then it is refused and the run is as it was
    assert_refused_unchanged(capsys, run_id, before, code, err)


def test_cancelling_a_run_without_its_actions_is_accepted_and_leaves_its_compensation_for_a_capable_process(
        capsys, project):
    # Given a waiting run whose completed step has a compensation (a custom action)
    run_id = waiting_run(capsys)
    # When it is cancelled in a process without the action's module (cancelling runs no action)
    code, out, err = cli(capsys, "cancel", run_id, "--as", "user:ann", "--json")
    # Then the cancel is accepted; the compensation waits for a process that has hello.undo
    assert code == 0, err
    shown = json.loads(out)
    assert shown["state"] == "compensating" and shown["waiting"]["step"] == "first@compensate"
    # And a process with the module finishes it: the run is cancelled (tests/e2e/test_cancel_without_actions.py)
    code, out, err = cli(capsys, "recover", "--actions", "hello_actions.py")
    assert code == 0 and state(capsys, run_id)["state"] == "cancelled", (out, err)


def test_dlq_redrive_without_the_action_module_refuses(capsys, project):
    # Given a dead-lettered run whose failed step is a custom action
    code, out, err = cli(capsys, "run", "hello-flaky.v1.yaml", "--actions", "hello_actions.py", "--json")
    assert code == 1, (out, err)
    run_id = json.loads(out)["run_id"]
    forget()
    code, out, err = cli(capsys, "dlq", "list", "--json")
    assert run_id in out, (out, err)
    before = state(capsys, run_id)
    (project / "fixed").write_text("")
    # When it is redriven in a process without the action's module
    code, out, err = cli(capsys, "dlq", "redrive", run_id)
    # Then it is refused and the run is as it was
    assert_refused_unchanged(capsys, run_id, before, code, err, action="hello.flaky")
    # And with the module, the redrive goes through
    code, out, err = cli(capsys, "dlq", "redrive", run_id, "--actions", "hello_actions.py", "--json")
    assert code == 0 and json.loads(out)["state"] == "completed", (out, err)


def test_the_hint_of_a_waiting_run_names_the_next_command_with_every_flag_it_needs(capsys, project, tmp_path):
    # Given a run started with --actions and --store flags, waiting for user:ben
    store = f"sqlite:///{tmp_path / 'other.db'}"
    code, out, err = cli(capsys, "run", "hello-gated.v1.yaml", "--actions", "hello_actions.py", "--store", store,
                         "--as", "user:ann")
    assert code == 3, (out, err)
    run_id = out.split()[1].rstrip(":")
    # Then the hint is the exact next command: the approver and the same flags
    assert (f"sealflow approve {run_id} --as user:ben --store {store} --actions hello_actions.py  or  "
            f"sealflow reject {run_id} --as user:ben --reason TEXT --store {store} --actions hello_actions.py") in out
    forget()
    # And following it works
    code, out, err = cli(capsys, "approve", run_id, "--as", "user:ben", "--store", store, "--actions",
                         "hello_actions.py")
    assert code == 0, (out, err)


# ---------------------------------------------------------------- messages

def test_open_development_mode_is_announced_once_by_a_command_that_acts_and_not_by_reads(capsys, project):
    # Given no access policy
    # When a run is started
    code, out, err = cli(capsys, "run", "hello-gated.v1.yaml", "--actions", "hello_actions.py", "--json")
    # Then the warning appears once
    assert err.count("OPEN DEVELOPMENT MODE") == 1, err
    run_id = json.loads(out)["run_id"]
    # And reading the run does not repeat it
    for argv in (("status", run_id), ("runs", "list"), ("audit", run_id), ("dlq", "list")):
        code, out, err = cli(capsys, *argv)
        assert "OPEN DEVELOPMENT MODE" not in err, argv


def test_run_without_actions_does_not_blame_actions_you_did_not_pass(capsys, project):
    # Given a definition naming a custom action, When it is run without --actions
    code, out, err = cli(capsys, "run", "hello-gated.v1.yaml")
    err = out + err
    # Then the hint says how to load the module, not "the --actions modules you passed"
    assert code == 1 and "unknown action 'hello.greet'" in err, err
    assert "you passed" not in err and "--actions MODULE" in err and "sealflow.yaml" in err


def test_a_broken_access_policy_gets_a_hint_about_access_policies(capsys, project):
    # Given an access policy that is not valid
    (project / "access.yaml").write_text("tenants: [1, 2]\n")
    # When a command loads it
    code, out, err = cli(capsys, "runs", "list", "--access", "access.yaml")
    # Then the hint is about access policies, not definitions
    assert code == 2, err
    assert "hint: an access policy names tenants" in err and "definition" not in err.lower(), err


def test_dlq_show_has_a_text_form_with_readable_times(capsys, project):
    # Given a dead-lettered run
    code, out, err = cli(capsys, "run", "hello-flaky.v1.yaml", "--actions", "hello_actions.py", "--json")
    run_id = json.loads(out)["run_id"]
    # When dlq show prints it without --json
    code, out, err = cli(capsys, "dlq", "show", run_id)
    # Then it is text, with UTC times to the second and the next command
    assert code == 0, err
    assert out.startswith(f"dead letter {run_id}  hello-flaky v1") and not out.lstrip().startswith("{")
    import re

    assert re.search(r"dead since:  \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ", out), out
    assert "invalid_request: not fixed yet" in out and f"sealflow dlq redrive {run_id}" in out
    # And --json still prints the whole record
    code, out, err = cli(capsys, "dlq", "show", run_id, "--json")
    assert json.loads(out)["run"]["id"] == run_id


@pytest.mark.parametrize(("seconds", "shown"), [(0.25, "250ms"), (5, "5s"), (2.834, "2.8s"), (150, "2m30s"),
                                                (86400, "24h"), (86399.6, "24h"), (95400, "26h30m")])
def test_durations_print_one_way(seconds, shown):
    from sealflow.cli.render import duration

    assert duration(seconds) == shown


def test_a_waiting_gate_shows_its_due_time_as_a_duration(capsys, project):
    code, out, err = cli(capsys, "run", "hello-gated.v1.yaml", "--actions", "hello_actions.py")
    assert code == 3 and ("(due in 1h)" in out or "(due in 59m" in out), out


def test_validate_reports_expression_syntax_beside_schema_errors_in_one_pass(capsys, project):
    # Given a definition with a bad duration, an unknown field, and a template that is not an expression
    (project / "broken.v1.yaml").write_text(
        "sealflow: 1\nname: broken\nversion: 1\nowner: team:demo\nsteps:\n  - id: a\n    action: hello.greet\n"
        "    with: {name: \"${{ input.name = 1 }}\"}\n    timeout: 5 minutes\n  - id: b\n    goto: nowhere\n")
    # When it is validated
    code, out, err = cli(capsys, "validate", "broken.v1.yaml")
    # Then all three are reported at once, each located
    assert code == 1
    assert "broken.v1.yaml:8:34: error[X301]: '=' is not an operator" in out, out
    assert "broken.v1.yaml:9:14: error[C409]" in out and "broken.v1.yaml:11:5: error[S202]" in out, out


def test_an_unknown_run_points_at_the_list_of_runs(capsys, project):
    code, out, err = cli(capsys, "status", "run_nope")
    assert code == 2 and "no run 'run_nope' in this store; `sealflow runs list` lists the runs" in err, err


def test_approvals_list_tells_the_initiator_why_their_own_gate_is_not_theirs_and_whom_to_ask(capsys, project):
    # Given a run started by user:ann whose gate user:ann and user:ben may both approve
    (project / "both.v1.yaml").write_text(DEFINITION.replace("name: hello-gated", "name: both").replace(
        "approvers: [user:ben]", "approvers: [user:ann, user:ben]"))
    code, out, err = cli(capsys, "run", "both.v1.yaml", "--actions", "hello_actions.py", "--as", "user:ann")
    run_id = out.split()[1].rstrip(":")
    # Then the hint of `run` names the approver who may answer, not the initiator
    assert code == 3 and f"sealflow approve {run_id} --as user:ben" in out, out
    # When user:ann lists the approvals waiting for her
    code, out, err = cli(capsys, "approvals", "list", "--as", "user:ann")
    # Then nothing is hers to decide, and it says why (separation of duties) and whom to ask
    assert code == 0 and "nothing waits for user:ann" in out
    assert f"{run_id}  both v1  at ask: not yours to decide, you started it (separation of duties" in out
    assert out.rstrip().endswith("ask user:ben"), out
