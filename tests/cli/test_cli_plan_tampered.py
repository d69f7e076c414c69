"""``status``, ``cancel`` and ``dlq redrive`` on a run whose stored plan is not what its digest says (issue 31).

Before, ``status`` of such a run answered only the refusal, and ``cancel`` and ``dlq redrive`` the bare
``PlanTampered`` message. Now ``status`` shows the run and says why it will not go on; ``cancel`` and ``dlq
redrive`` refuse naming the act and the run (exit 1, nothing changed). Never a traceback. (``recover``:
test_cli_recover_tampered.py.)"""

from __future__ import annotations

import json

from tests.cli.test_cli_recover_tampered import cli, two_runs  # noqa: F401 - two_runs is a fixture


def test_given_a_queued_run_whose_plan_was_tampered_when_status_is_read_then_it_is_shown_saying_why(
        capsys, two_runs):  # noqa: F811
    _, other = two_runs
    # When status reads it (text, then JSON)
    code, out, err = cli(capsys, "status", other)
    # Then the run is shown, with why it will not go on and what to do (exit 3: it is still queued)
    assert code == 3, (out, err)
    assert out.startswith(f"run {other}  other v1") and "state: queued" in out
    assert "refused at x: the stored plan sha256:" in out and "does not match its digest" in out
    assert "the process that takes its next step fails it into the dead-letter list; restore that row" in out
    code, out, err = cli(capsys, "status", other, "--json")
    waiting = json.loads(out)["waiting"]
    assert waiting["kind"] == "plan_tampered" and waiting["step"] == "x" and waiting["plan"].startswith("sha256:")


def test_given_a_queued_run_whose_plan_was_tampered_when_cancelled_or_redriven_then_refused_naming_the_act(
        capsys, two_runs):  # noqa: F811
    _, other = two_runs
    # When an operator cancels it, then redrives it
    cancelled = cli(capsys, "cancel", other, "--reason", "stop")
    redriven = cli(capsys, "dlq", "redrive", other)
    # Then each is refused, saying what and why, and nothing changed
    for verb, (code, out, err) in (("cancel", cancelled), ("redrive", redriven)):
        assert code == 1, (verb, out, err)
        assert err.startswith(f"sealflow: refused: cannot {verb} run {other} (other v1): the stored plan"), err
        assert "nothing was changed" in err and "hint: restore that row" in err
    code, out, err = cli(capsys, "status", other, "--json")
    assert json.loads(out)["state"] == "queued"
