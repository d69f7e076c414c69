"""The run commands (run, submit, status, approve, ...): what they print while a run is driven and after."""

from __future__ import annotations

from pathlib import Path

from sealflow.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "definitions" / "lead-qualification.v1.yaml")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


SLOW_ACTIONS = '''
import time
from sealflow import action

@action("slowcli.work", permissions=[], effect="read")
def work(ctx, seconds: float = 0.5):
    time.sleep(seconds)
    return {"slept": seconds}
'''

SLOW_WORKFLOW = """\
sealflow: 1
name: slowcli
version: 1
owner: team:test
steps:
  - {id: first, action: slowcli.work, with: {seconds: 0.8}}
  - {id: done, succeed: {}}
"""


def test_given_a_slow_step_when_run_then_its_start_is_printed_before_it_ends(capsys, tmp_path):
    (tmp_path / "slow_actions.py").write_text(SLOW_ACTIONS)
    (tmp_path / "slowcli.v1.yaml").write_text(SLOW_WORKFLOW)
    code, out, _ = run(capsys, "run", str(tmp_path / "slowcli.v1.yaml"), "--actions", str(tmp_path / "slow_actions.py"))
    lines = [line.split() for line in out.splitlines() if line.startswith("  first")]
    assert code == 0
    assert [line[3] for line in lines] == ["started", "succeeded"]


def test_given_a_run_that_waits_for_approval_when_run_and_status_print_it_then_they_say_the_same_and_approve_ends_it(
        capsys, monkeypatch):
    monkeypatch.setenv("SEALFLOW_USER", "alice")
    # Given a run of the example that waits for a sales manager (the README's quick start)
    code, out, _ = run(capsys, "run", EXAMPLE, "--input", '{"lead_id": "lead_acme"}')
    assert code == 3
    run_id = out.split()[1].rstrip(":")
    outcome = out[out.index("state: "):]
    # When status prints the same run
    code, shown, _ = run(capsys, "status", run_id)
    # Then it ends with exactly the lines run ended with (one renderer), naming the gate and how to answer
    assert code == 3 and shown.endswith(outcome)
    assert f"waiting for approval at record@gate by role:sales-manager (quorum 1); answer with: sealflow approve " \
           f"{run_id} --as PRINCIPAL  or  sealflow reject {run_id} --as PRINCIPAL --reason TEXT" in outcome
    # And approving as a sales manager drives it to its end
    code, out, _ = run(capsys, "approve", run_id, "--as", "user:ben")
    assert code == 0 and "state: completed" in out


def test_given_detach_when_run_then_it_queues_the_run_and_returns_at_once(capsys, tmp_path):
    # Given a definition, when `sealflow run --detach`
    store = f"sqlite:///{tmp_path}/s.db"
    code, out, _ = run(capsys, "run", EXAMPLE, "--store", store, "--detach", "--json",
                       "--input", '{"lead_id": "lead_acme"}')
    # Then it printed the run queued, and nothing drove it
    import json

    got = json.loads(out)
    assert code == 0 and got["state"] == "queued" and got["run_id"]


def test_given_garbage_input_when_run_then_a_usage_error_never_an_internal_error(capsys, tmp_path, monkeypatch):
    # Given inputs a fuzzer sends: a number that reads as infinity, NaN, and lists nested thousands deep
    monkeypatch.chdir(tmp_path)
    for raw, said in (('{"lead_id": 1e400}', "would read as infinity"), ('{"x": NaN}', "not a JSON number"),
                      ("[" * 5000, "nests too deeply")):
        code, _, err = run(capsys, "run", EXAMPLE, "--input", raw)
        # Then exit 2 with a sentence that says what is wrong, and no run is created
        assert code == 2 and said in err and "internal error" not in err, err


def test_given_an_input_missing_several_fields_when_run_then_every_problem_is_named_at_once(capsys, tmp_path,
                                                                                           monkeypatch):
    # Given the document-ingestion example, whose input needs document_id, revision and visibility
    monkeypatch.chdir(tmp_path)
    ingestion = str(ROOT / "definitions" / "document-ingestion.v1.yaml")
    # When it is run with an empty input
    code, _, err = run(capsys, "run", ingestion, "--input", "{}")
    # Then one message names all three missing fields, so the input is fixed in one go, not one field a try
    assert code != 0 and "internal error" not in err
    for field in ("document_id", "revision", "visibility"):
        assert f"'{field}' is a required property" in err, err
    assert err.count("is a required property") == 3 and "fix the input to match its input.schema" in err


def test_given_a_reason_over_2000_characters_when_approve_reject_or_cancel_then_a_usage_error_and_nothing_changes(
        capsys, monkeypatch):
    monkeypatch.setenv("SEALFLOW_USER", "alice")
    # Given a run of the example waiting for a sales manager
    code, out, _ = run(capsys, "run", EXAMPLE, "--input", '{"lead_id": "lead_acme"}')
    assert code == 3
    run_id = out.split()[1].rstrip(":")
    long = "r" * 2001
    # When a person approves, rejects or cancels it with 2,001 characters of text
    for argv, what in ((("approve", "--comment"), "the approval's comment"),
                       (("reject", "--reason"), "the rejection's reason"),
                       (("cancel", "--reason"), "the cancel's reason")):
        code, _, err = run(capsys, argv[0], run_id, "--as", "user:ben", argv[1], long)
        # Then each is a usage error that says what is too long and the limit, never an internal error
        assert code == 2, err
        assert f"{what} is 2001 characters long; at most 2000 are kept" in err and "internal error" not in err
    # And the run still waits
    code, shown, _ = run(capsys, "status", run_id)
    assert code == 3 and "waiting for approval" in shown


def test_given_a_definition_that_is_not_there_when_run_or_submitted_then_that_alone_is_said(capsys, tmp_path,
                                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command in ("run", "submit"):
        # When a path that names no file is run or submitted
        code, _, err = run(capsys, command, "definitions/nothere.v1.yaml")
        # Then it is a usage error naming the path, with no warning about verifying what is not there
        assert code == 2 and err.endswith("sealflow: error: definitions/nothere.v1.yaml: no such file\n"), err
        assert "not verified" not in err


HANDOUT_ACTIONS = '''
from pathlib import Path
from sealflow import action

@action("cbcli.render", permissions=[], effect="write")
def render(ctx, out: str):
    Path(out).write_text(ctx.callback.token)   # the called system receives the token
    return {"job": "queued"}
'''

HANDOUT_WORKFLOW = """\
sealflow: 1
name: cbcli
version: 1
owner: team:test
steps:
  - id: render
    action: cbcli.render
    with: {out: "TOKEN_FILE"}
    callback: {timeout: 1h, schema: {type: object, required: [url]}}
  - {id: done, succeed: {output: "${{ steps.render.output.url }}"}}
"""


def test_given_a_run_waiting_for_a_callback_when_completed_from_the_cli_then_it_ends_with_the_result(
        capsys, tmp_path, monkeypatch):
    # Given a run whose action handed its callback token to "the renderer" (a file here)
    token_file = tmp_path / "token"
    (tmp_path / "cb_actions.py").write_text(HANDOUT_ACTIONS)
    (tmp_path / "cbcli.v1.yaml").write_text(HANDOUT_WORKFLOW.replace("TOKEN_FILE", str(token_file)))
    actions = str(tmp_path / "cb_actions.py")
    code, out, _ = run(capsys, "run", str(tmp_path / "cbcli.v1.yaml"), "--actions", actions)
    assert code == 3 and "state: waiting" in out
    # When a wrong result, then the right one, is posted with the token read from stdin
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(token_file.read_text() + "\n"))
    code, _, err = run(capsys, "callbacks", "complete", token_file.read_text(), "--data", '{"nope": 1}',
                       "--actions", actions)
    assert code == 1 and "callback invalid" in err and "'url' is a required property" in err
    code, out, _ = run(capsys, "callbacks", "complete", "-", "--data", '{"url": "https://img/1.png"}',
                       "--actions", actions)
    # Then the run completed with it; the same token again is refused
    assert code == 0 and "state: completed" in out and "https://img/1.png" in out
    code, _, err = run(capsys, "callbacks", "complete", token_file.read_text(), "--data", '{"url": "x"}',
                       "--actions", actions)
    assert code == 1 and "callback superseded" in err


def test_given_tags_when_runs_are_submitted_then_runs_list_finds_them_by_tag(capsys, tmp_path):
    import json

    # Given two runs queued with tags on one store, one of them for customer c-42
    store = f"sqlite:///{tmp_path}/s.db"
    code, out, _ = run(capsys, "submit", EXAMPLE, "--store", store, "--json", "--input", '{"lead_id": "lead_acme"}',
                       "--tag", "customer=c-42", "--tag", "source=web")
    assert code == 0, out
    tagged = json.loads(out)["run_id"]
    assert run(capsys, "submit", EXAMPLE, "--store", store, "--input", '{"lead_id": "lead_midco"}',
               "--tag", "customer=c-7")[0] == 0
    # When the runs are listed by the tag
    code, out, _ = run(capsys, "runs", "list", "--store", store, "--tag", "customer=c-42", "--json")
    # Then only the tagged run is listed, and its status shows its tags
    assert code == 0 and [r["run_id"] for r in json.loads(out)] == [tagged]
    code, out, _ = run(capsys, "status", tagged, "--store", store, "--json")
    assert json.loads(out)["tags"] == {"customer": "c-42", "source": "web"}
    # and a tag that is not NAME=VALUE is a usage error saying so
    code, _, err = run(capsys, "submit", EXAMPLE, "--store", store, "--tag", "customer")
    assert code == 2 and "NAME=VALUE" in err
