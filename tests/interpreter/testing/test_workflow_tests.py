"""`sealflow test` (issue 34): test files beside definitions, run on the real engine in virtual time."""

from __future__ import annotations

import json
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from sealflow.cli.actions_loader import action_info
from sealflow.cli.commands.test import demo_world
from sealflow.cli.session import import_actions
from sealflow.execution.actions import Registry, action
from sealflow.testing.workflows import report, run_file
from sealflow.testing.workflows.spec import TestFileError, load

ROOT = Path(__file__).resolve().parents[3]
DEFINITIONS = ROOT / "definitions"
LEAD = DEFINITIONS / "lead-qualification.v1.yaml"


@pytest.fixture(autouse=True)
def _demo_actions() -> None:
    import_actions((), demo=True)


def write(tmp_path: Path, body: str, name: str = "lead.test.yaml") -> Path:
    path = tmp_path / name
    path.write_text(f"sealflow_test: 1\ndefinition: {LEAD}\n{body}", encoding="utf-8")
    return path


MEDIUM = "    input: {lead_id: lead_midco}\n    answers: {classify: {classification: medium, reason: mid}}\n"


def test_every_definition_has_a_test_file_that_passes() -> None:
    # Given the definitions shipped and their test files
    tests = {p.name.removesuffix(".test.yaml") for p in (DEFINITIONS / "tests").glob("*.test.yaml")}
    shipped = {p.name.removesuffix(".v1.yaml") for p in DEFINITIONS.glob("*.yaml")}
    # Then each definition has one
    assert shipped <= tests, f"definitions without a test file: {sorted(shipped - tests)}"
    # When every test file runs
    results = [run_file(p, world=demo_world) for p in sorted((DEFINITIONS / "tests").glob("*.test.yaml"))]
    # Then every case passes
    failed = [f"{f.path.name}::{c.name}: {c.failures}" for f in results for c in f.cases if not c.passed]
    assert not failed and all(not f.errors for f in results), failed or [f.errors for f in results]


def test_a_wrong_output_fails_naming_the_case_the_expectation_and_the_difference(tmp_path: Path) -> None:
    # Given a case that expects an output the run does not produce
    path = write(tmp_path, "cases:\n  - name: wrong\n" + MEDIUM + "    expect:\n      state: completed\n"
                 "      output_includes: {sent: true}\n      not_ran: [follow_up]\n")
    # When it runs
    result = run_file(path, world=demo_world)
    # Then it fails, each difference located at its expectation's line, saying what differs
    (case,) = result.cases
    assert not case.passed
    assert any(f.startswith(f"{path}:9:") and "output_includes" in f and "expected a map including" in f
               for f in case.failures), case.failures
    assert any(f.startswith(f"{path}:10:") and "not_ran: step follow_up ran" in f for f in case.failures)
    # and the text report names the case
    assert "FAIL" in report.text([result]) and "::wrong" in report.text([result])


def test_a_24_hour_approval_expiry_takes_virtual_time_not_real_sleep(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a high lead whose approval nobody answers, and every real sleep recorded
    slept: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda s: (slept.append(s), real_sleep(min(s, 0.001))))
    path = write(tmp_path, "cases:\n  - name: expire\n    input: {lead_id: lead_midco}\n"
                 "    answers: {classify: {classification: high, reason: big}}\n"
                 "    approvals: {record: expire}\n    expect: {state: timed_out}\n")
    # When it runs
    (case,) = run_file(path, world=demo_world).cases
    # Then the run's clock moved past its budget while the process asked for almost no real sleep
    assert case.passed, case.failures
    assert case.virtual_seconds >= 600
    assert sum(slept) < 5, slept


def test_a_fault_fails_the_first_calls_and_the_effect_is_applied_once(tmp_path: Path) -> None:
    # Given a CRM write that fails twice with a retryable class, then answers
    path = write(tmp_path, "cases:\n  - name: flaky\n" + MEDIUM +
                 "    faults: [{step: record, error: unavailable, times: 2}]\n"
                 "    expect: {state: completed, calls: {record: 3}, effects: {crm.add_note: 1}}\n")
    # When it runs
    (case,) = run_file(path, world=demo_world).cases
    # Then the step was called three times and applied its effect once
    assert case.passed, case.failures


def test_a_fault_beyond_the_retry_class_fails_the_run_with_that_class(tmp_path: Path) -> None:
    # Given the email (retry: once) failing with a timeout
    path = write(tmp_path, "cases:\n  - name: once\n" + MEDIUM +
                 "    faults: [{step: follow_up, error: timeout}]\n"
                 "    expect: {state: failed, error: timeout, effects: {email.send: 0}}\n")
    # When it runs
    (case,) = run_file(path, world=demo_world).cases
    # Then the run failed with the injected class and sent nothing
    assert case.passed, case.failures


def test_an_action_answer_replaces_the_action_and_must_fit_its_declared_output(tmp_path: Path) -> None:
    # Given a case answering for the CRM lookup with a lead record
    lead = {"lead_id": "lead_x", "email": "x@example.com", "company": "X", "employees": 5}
    path = write(tmp_path, "cases:\n  - name: answered\n" + MEDIUM +
                 f"    steps: {{fetch_lead: {{return: {json.dumps(lead)}}}}}\n"
                 "    expect: {state: completed, effects: {email.send: 1}}\n")
    # When it runs
    (case,) = run_file(path, world=demo_world).cases
    # Then the run used it
    assert case.passed, case.failures


def test_an_unanswered_approval_gate_fails_the_case_saying_how_to_answer_it(tmp_path: Path) -> None:
    # Given a high lead and no approvals: in the case
    path = write(tmp_path, "cases:\n  - name: silent\n    input: {lead_id: lead_midco}\n"
                 "    answers: {classify: {classification: high, reason: big}}\n    expect: {state: completed}\n")
    # When it runs
    (case,) = run_file(path, world=demo_world).cases
    # Then the case fails, naming the gate and the fix
    assert any("waits for an approval at record" in f and "approve | reject | expire" in f for f in case.failures)


def test_a_cancel_at_a_step_cancels_the_run_after_its_call(tmp_path: Path) -> None:
    # Given a cancel while the note is written
    path = write(tmp_path, "cases:\n  - name: cancel\n" + MEDIUM + "    cancel_at: record\n"
                 "    expect: {state: cancelled, not_ran: [follow_up], effects: {crm.add_note: 1}}\n")
    # When it runs / Then the run is cancelled after the note and before the email
    (case,) = run_file(path, world=demo_world).cases
    assert case.passed, case.failures


def test_an_input_refused_at_submit_is_expected_as_refused(tmp_path: Path) -> None:
    # Given an input that breaks the definition's pattern
    path = write(tmp_path, "cases:\n  - name: bad input\n    input: {lead_id: NOPE}\n    expect: {state: refused}\n"
                 "  - name: expected to run\n    input: {lead_id: NOPE}\n    expect: {state: completed}\n")
    # When it runs
    refused, ran = run_file(path, world=demo_world).cases
    # Then the first passes and the second says why it failed
    assert refused.passed, refused.failures
    assert not ran.passed and "refused at submit" in ran.failures[0]


@pytest.mark.parametrize("body, message", [
    ("cases:\n  - name: a\n    expect: {stat: completed}\n", "unknown field 'stat'"),
    ("cases:\n  - name: a\n    expect: {state: done}\n", "cases[0].expect.state"),
    ("cases:\n  - name: a\n    expect: {state: completed}\n  - name: a\n    expect: {state: completed}\n",
     "two cases are named 'a'"),
    ("cases:\n  - name: a\n    steps: {x: {return_file: nope.json}}\n    expect: {state: completed}\n",
     "cannot read nope.json"),
    ("cases:\n  - name: a\n    faults: [{step: x, error: boom}]\n    expect: {state: completed}\n", "faults[0].error"),
    ("cases:\n  - name: a\n    steps: {x: {return_file: /dev/zero}}\n    expect: {state: completed}\n",
     "/dev/zero is not a file"),
])
def test_a_broken_test_file_is_refused_with_a_located_error(tmp_path: Path, body: str, message: str) -> None:
    # Given a test file with one mistake
    path = write(tmp_path, body)
    # When it is loaded
    with pytest.raises(TestFileError) as caught:
        load(path)
    # Then the error is located in the file and says what is wrong
    text = str(caught.value)
    assert text.startswith(f"{path}:") and message in text, text


@pytest.mark.parametrize(("case", "line", "message"), [
    ("    faults: [{step: recrod, error: crash}]\n", 6, "has no step 'recrod'; did you mean 'record'?"),
    ("    steps: {fetch_led: {return: {}}}\n", 6, "has no step 'fetch_led'; did you mean 'fetch_lead'?"),
    ("    actions: {crm.add_nte: {return: {}}}\n", 6, "has no action 'crm.add_nte'; did you mean 'crm.add_note'?"),
    ("    answers: {route: {}}\n", 6, "step 'route' of lead-qualification is not an ai step"),
    ("    approvals: {follow_up: approve}\n", 6, "step 'follow_up' of lead-qualification is not an approval gate"),
    ("    cancel_at: nowhere\n", 6, "has no step 'nowhere'"),
    ("    revoke_before: nowhere\n", 6, "has no step 'nowhere'"),
    ("    expect: {not_ran: [folow_up]}\n", 6, "has no step 'folow_up'; did you mean 'follow_up'?"),
    ("    expect: {effects: {email.sned: 1}}\n", 6, "has no step or action 'email.sned'"),
])
def test_a_name_the_definition_lacks_is_a_located_error_not_a_silent_no_op(tmp_path: Path, case: str, line: int,
                                                                            message: str) -> None:
    # Given a case naming a step, action or gate the definition does not have (a typo)
    expect = "" if "expect:" in case else "    expect: {state: completed}\n"
    path = write(tmp_path, "cases:\n  - name: typo\n    input: {lead_id: lead_midco}\n" + case + expect)
    # When the file runs
    result = run_file(path, world=demo_world)
    # Then nothing runs: the file is refused at the name's line, saying what is wrong and what was meant
    assert not result.cases and len(result.errors) == 1, result.errors
    (error,) = result.errors
    assert error.format().startswith(f"{path}:{line}:") and message in error.message, error.format()


def test_a_test_file_naming_a_missing_definition_is_refused(tmp_path: Path) -> None:
    # Given a test file whose definition path leads nowhere
    path = tmp_path / "x.test.yaml"
    path.write_text("sealflow_test: 1\ndefinition: nowhere.yaml\ncases:\n  - {name: a, expect: {state: completed}}\n")
    # When it runs
    result = run_file(path)
    # Then the file is reported with the definition's line
    assert result.errors and f"{path}:2:" in result.errors[0].format() and "does not exist" in result.errors[0].message


def test_junit_xml_has_a_testcase_per_case_and_the_failure(tmp_path: Path) -> None:
    # Given one passing and one failing case
    path = write(tmp_path, "cases:\n  - name: good\n" + MEDIUM + "    expect: {state: completed}\n"
                 "  - name: bad\n" + MEDIUM + "    expect: {state: failed}\n")
    results = [run_file(path, world=demo_world)]
    # When the JUnit XML is written
    root = ET.fromstring(report.junit(results))
    # Then it holds both, the failing one with its message
    cases = root.findall(".//testcase")
    assert [c.get("name") for c in cases] == ["good", "bad"]
    assert cases[0].find("failure") is None
    assert "expected failed, got completed" in cases[1].find("failure").get("message")
    assert root.find("testsuite").get("failures") == "1"


def test_a_permission_revoked_before_a_write_refuses_it_before_its_action_runs(tmp_path: Path) -> None:
    # Given the initiator losing email:send once the run is submitted
    path = write(tmp_path, "cases:\n  - name: revoked\n" + MEDIUM + "    revoke_before: follow_up\n"
                 "    expect: {state: failed, error: unauthorized, calls: {follow_up: 0},\n"
                 "             effects: {crm.add_note: 1}}\n")
    # When it runs
    (case,) = run_file(path, world=demo_world).cases
    # Then the note (written before) stands, and the email is refused without being called
    assert case.passed, case.failures


def test_a_recording_serves_the_model_calls_and_a_call_it_lacks_fails_the_case(tmp_path: Path) -> None:
    # Given a recording of the lead definition's model call for one lead, made by `sealflow run --record`
    from sealflow.cli import main

    recording = tmp_path / "lead.jsonl"
    assert main(["run", str(LEAD), "--input", '{"lead_id": "lead_midco"}', "--record", str(recording)]) == 0
    path = tmp_path / "lead.test.yaml"
    path.write_text(f"sealflow_test: 1\ndefinition: {LEAD}\nrecording: lead.jsonl\ncases:\n"
                    "  - name: replayed\n    input: {lead_id: lead_midco}\n    expect: {state: completed}\n"
                    "  - name: unseen\n    input: {lead_id: lead_acme}\n    expect: {state: completed}\n")
    # When the test file runs
    replayed, unseen = run_file(path, world=demo_world).cases
    # Then the recorded call is answered, and the one it lacks fails its case, naming the step and the recording
    assert replayed.passed, replayed.failures
    assert any("recording: step classify: model call not in the recording" in f for f in unseen.failures)


def test_a_recording_that_does_not_exist_is_a_located_error(tmp_path: Path) -> None:
    # Given a test file naming a recording nobody made
    path = write(tmp_path, "recording: nope.jsonl\ncases:\n  - name: a\n    expect: {state: completed}\n")
    # When it is loaded / Then the error points at the line and says how to make one
    with pytest.raises(TestFileError) as caught:
        load(path)
    assert f"{path}:3:" in str(caught.value) and "sealflow run --record nope.jsonl" in str(caught.value)


@pytest.mark.parametrize("fault, expect", [
    ("{step: classify, error: malformed}", "{state: completed, calls: {classify: 2}}"),
    ("{step: classify, error: refused}", "{state: failed, error: policy_denied, calls: {classify: 1}}"),
    ("{step: fetch_lead, error: malformed, times: 2}", "{state: completed, calls: {fetch_lead: 3}}"),
])
def test_a_malformed_answer_meets_the_steps_checks_and_a_refusal_is_not_retried(tmp_path: Path, fault: str,
                                                                                 expect: str) -> None:
    # Given a model answer that is not JSON, a content-policy refusal, or an action's garbage result
    path = write(tmp_path, f"cases:\n  - name: f\n    input: {{lead_id: lead_midco}}\n    faults: [{fault}]\n"
                           f"    expect: {expect}\n")
    # When it runs / Then the step's own repair or retry meets it, and a refusal fails at once
    (case,) = run_file(path, world=demo_world).cases
    assert case.passed, case.failures


def test_a_step_delivered_again_after_the_run_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    # Given the note and the email delivered again once the run has completed
    path = write(tmp_path, "cases:\n  - name: again\n" + MEDIUM +
                 "    faults: [{step: record, error: duplicate}, {step: follow_up, error: duplicate}]\n"
                 "    expect: {state: completed, calls: {record: 1, follow_up: 1}, audit: [message_refused]}\n")
    # When it runs
    (case,) = run_file(path, world=demo_world).cases
    # Then each copy was refused (audited), neither action ran again, and no invariant broke
    assert case.passed, case.failures
    assert not case.violations


def test_a_crash_after_a_keyed_write_reruns_it_under_the_same_key_and_applies_it_once(tmp_path: Path) -> None:
    # Given the worker writing the note dying after the CRM took it, before its result was committed
    path = write(tmp_path, "cases:\n  - name: crash\n" + MEDIUM +
                 "    faults: [{step: record, error: crash}]\n"
                 "    expect: {state: completed, calls: {record: 2}, effects: {crm.add_note: 1, email.send: 1}}\n")
    # When it runs
    (case,) = run_file(path, world=demo_world).cases
    # Then the attempt was lost and run again (its lease ended in virtual time), the CRM was called twice under
    # one key and applied the note once, and no invariant broke (the lost call is not a completed one repeated)
    assert case.passed, case.failures
    assert not case.violations
    assert case.calls_at("record") == 2
    assert case.virtual_seconds >= 20  # the step's lease (its 20 s timeout and a margin) ran out in virtual time


def test_a_crash_after_a_write_without_an_idempotency_key_is_reported_as_an_effect_applied_twice(
        tmp_path: Path) -> None:
    # Given a definition whose note has no idempotency key, and its worker dying after the CRM took the note
    definition = tmp_path / "notes.yaml"
    definition.write_text(
        "sealflow: 1\nname: notes\nversion: 1\nowner: team:test\npermissions: [crm:write]\n"
        "input: {schema: {type: object}}\n"
        "steps:\n  - id: note\n    action: crm.add_note\n"
        "    with: {lead_id: lead_midco, note: hello}\n    permissions: [crm:write]\n", encoding="utf-8")
    path = tmp_path / "notes.test.yaml"
    path.write_text(f"sealflow_test: 1\ndefinition: {definition}\ncases:\n  - name: crash\n    input: {{}}\n"
                    "    faults: [{step: note, error: crash}]\n    expect: {state: completed}\n", encoding="utf-8")
    # When it runs
    (case,) = run_file(path, world=demo_world).cases
    # Then the run completes, but the case fails: the effect was applied twice, and the message says how to fix it
    assert case.state == "completed"
    assert any("applied twice" in v and "idempotency_key" in v for v in case.violations), case.violations
    assert not case.passed


def test_a_step_lost_lost_attempts_times_in_a_row_quarantines_the_run(tmp_path: Path) -> None:
    # Given the note's worker dying on three attempts in a row (the runtime's lost_attempts, 3)
    path = write(tmp_path, "cases:\n  - name: poison\n" + MEDIUM +
                 "    faults: [{step: record, error: crash, times: 3}]\n"
                 "    expect: {state: quarantined, error: worker_lost, not_ran: [follow_up],"
                 " effects: {crm.add_note: 1, email.send: 0}}\n")
    # When it runs
    (case,) = run_file(path, world=demo_world).cases
    # Then it is poison: not run a fourth time, the run quarantined for an operator, the email never sent
    assert case.passed, case.failures
    # (three attempts ran and died; the fourth is judged poison at its claim, before its action runs)
    assert case.calls_at("record") == 3


def test_a_crash_at_a_model_step_reruns_the_call_and_the_run_completes(tmp_path: Path) -> None:
    # Given the worker dying after the model answered the classification
    path = write(tmp_path, "cases:\n  - name: crash\n" + MEDIUM +
                 "    faults: [{step: classify, error: crash}]\n"
                 "    expect: {state: completed, calls: {classify: 2}, effects: {email.send: 1}}\n")
    # When it runs / Then the model was asked again and the run went on once
    (case,) = run_file(path, world=demo_world).cases
    assert case.passed, case.failures


def test_a_crash_at_a_step_the_run_never_reaches_fails_the_case_saying_so(tmp_path: Path) -> None:
    # Given a low lead (it ends before the note) and a crash asked for at the note
    path = write(tmp_path, "cases:\n  - name: unreached\n    input: {lead_id: lead_midco}\n"
                 "    answers: {classify: {classification: low, reason: tiny}}\n"
                 "    faults: [{step: record, error: crash}]\n    expect: {state: completed}\n")
    # When it runs
    (case,) = run_file(path, world=demo_world).cases
    # Then the case fails: the crash was never injected, so it proved nothing
    assert any("crash: step record" in f and "not injected" in f for f in case.failures), case.failures


OWN = Registry()
SENT: list[str] = []


@action("own.lookup", registry=OWN)
def own_lookup(ctx: object, key: str) -> dict:
    return {"found": key}


@action("own.send", effect="irreversible", registry=OWN)
def own_send(ctx: object, key: str) -> dict:
    SENT.append(key)
    return {"sent": key}


def _own_definition(tmp_path: Path, real_actions: str = "") -> Path:
    definition = tmp_path / "own.yaml"
    definition.write_text(
        "sealflow: 1\nname: own\nversion: 1\nowner: team:test\ninput: {schema: {type: object}}\nsteps:\n"
        "  - id: look\n    action: own.lookup\n    with: {key: k}\n"
        "  - id: send\n    action: own.send\n    with: {key: k}\n    idempotency_key: \"${{ run.id }}:send\"\n",
        encoding="utf-8")
    path = tmp_path / "own.test.yaml"
    path.write_text(f"sealflow_test: 1\ndefinition: {definition}\n{real_actions}cases:\n  - name: as is\n"
                    "    input: {}\n    expect: {state: completed}\n", encoding="utf-8")
    return path


def _compiled_with_own(path: Path):
    return run_file(path, registry=OWN, actions={name: action_info(act) for name, act in OWN.items()})


def test_a_projects_irreversible_action_left_unanswered_is_not_called_and_fails_the_case(tmp_path: Path) -> None:
    # Given a project's own irreversible action, which the case does not answer
    SENT.clear()
    path = _own_definition(tmp_path)
    # When the file runs
    (case,) = _compiled_with_own(path).cases
    # Then it was never called (the read before it was), and the case fails saying how to answer it
    assert SENT == []
    assert any("unanswered: step send calls own.send (irreversible)" in f and "real_actions: [own.send]" in f
               for f in case.failures), case.failures


def test_an_action_listed_in_real_actions_acts_for_real(tmp_path: Path) -> None:
    # Given the same action listed as acting on a world the test owns
    SENT.clear()
    path = _own_definition(tmp_path, "real_actions: [own.send]\n")
    # When the file runs / Then it acted, and the case passes
    (case,) = _compiled_with_own(path).cases
    assert case.passed, case.failures
    assert SENT == ["k"]


def test_real_actions_naming_an_action_the_definition_lacks_is_a_located_error(tmp_path: Path) -> None:
    path = _own_definition(tmp_path, "real_actions: [own.sned]\n")
    result = _compiled_with_own(path)
    assert not result.cases and "has no action 'own.sned'; did you mean 'own.send'?" in result.errors[0].message
    assert result.errors[0].format().startswith(f"{path}:3:")


SCAN_WAIT = """\
sealflow: 1
name: scan-wait
version: 1
owner: team:t
input: {schema: {type: object, required: [file_id], properties: {file_id: {type: string}}}}
steps:
  - id: verdict
    wait:
      event: scan.finished
      match: "event.data.file_id == input.file_id"
      schema: {type: object, required: [clean], properties: {clean: {type: boolean}}}
      timeout: 1h
  - id: done
    succeed: {output: "${{ steps.verdict.output }}"}
"""


def _scan_test(tmp_path: Path, cases: str) -> Path:
    (tmp_path / "scan.yaml").write_text(SCAN_WAIT, encoding="utf-8")
    path = tmp_path / "scan.test.yaml"
    path.write_text(f"sealflow_test: 1\ndefinition: scan.yaml\ncases:\n{cases}", encoding="utf-8")
    return path


def test_an_event_a_case_delivers_at_a_wait_is_taken_when_it_matches(tmp_path: Path) -> None:
    # Given a case delivering, at the wait, a verdict on another file and then one on this file
    path = _scan_test(tmp_path, "  - name: verdict\n    input: {file_id: f1}\n    events:\n"
                                "      - {step: verdict, data: {file_id: f2, clean: true}}\n"
                                "      - {step: verdict, data: {file_id: f1, clean: false}}\n"
                                "    expect: {state: completed, output: {file_id: f1, clean: false}}\n")
    # When it runs / Then the run took the matching one and completed with it
    (case,) = run_file(path).cases
    assert case.passed, case.failures


def test_a_wait_given_no_event_times_out_in_virtual_time(tmp_path: Path) -> None:
    path = _scan_test(tmp_path, "  - name: silence\n    input: {file_id: f1}\n"
                                "    expect: {state: failed, error: timeout}\n")
    (case,) = run_file(path).cases
    assert case.passed, case.failures
    assert case.virtual_seconds >= 3600


def test_an_event_for_a_step_that_waits_for_none_is_a_located_error(tmp_path: Path) -> None:
    path = _scan_test(tmp_path, "  - name: wrong\n    input: {file_id: f1}\n    events:\n"
                                "      - {step: done, data: {}}\n    expect: {state: completed}\n")
    result = run_file(path)
    assert not result.cases and "step 'done' of scan-wait is not a wait for an event" in result.errors[0].message


RENDER = """\
sealflow: 1
name: render
version: 1
owner: team:t
steps:
  - id: generate
    action: own.render
    with: {prompt: cat}
    callback: {timeout: 30m, schema: {type: object, required: [image_url]}}
  - id: done
    succeed: {output: "${{ steps.generate.output.image_url }}"}
"""


@action("own.render", registry=OWN)
def own_render(ctx: object, prompt: str) -> dict:
    return {"job": "queued"}


def _render_test(tmp_path: Path, cases: str) -> Path:
    (tmp_path / "render.yaml").write_text(RENDER, encoding="utf-8")
    path = tmp_path / "render.test.yaml"
    path.write_text(f"sealflow_test: 1\ndefinition: render.yaml\ncases:\n{cases}", encoding="utf-8")
    return path


@pytest.mark.parametrize(("posted", "expect"), [
    ("{step: generate, data: {image_url: 'https://img/cat.png'}}", "{state: completed, output: 'https://img/cat.png'}"),
    ("{step: generate, error: unavailable, message: renderer down}", "{state: failed, error: unavailable}"),
    ("{step: generate, data: {url: wrong}}", "{state: failed, error: timeout, audit: [callback_refused]}"),
])
def test_a_callback_result_a_case_posts_completes_or_fails_the_step(tmp_path: Path, posted: str, expect: str) -> None:
    # Given a step whose action hands out a callback, and a case posting its result (or a wrong one: then it waits
    # on until its timeout)
    path = _render_test(tmp_path, f"  - name: called back\n    input: {{}}\n    callbacks: [{posted}]\n"
                                  f"    expect: {expect}\n")
    # When it runs / Then the run ends as the result says
    (case,) = _compiled_with_own(path).cases
    assert case.passed, case.failures
