"""``call`` at compile time and in review: the child is found beside its caller, compiled and pinned by digest; the
caller's digest covers the child's; what cannot be pinned is a located error; the security diff shows a changed
child (D635) with its own findings; a signed caller is trusted only with its children signed under the same
policy. (Run time: tests/interpreter/engine/test_call_runs.py; codes C428-C430: tests/cases.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sealflow.dsl.api import check_file
from sealflow.dsl.diff import diff_plans
from sealflow.dsl.plan import Plan
from sealflow.dsl.trust import Refused, verify_file

sys.path.insert(0, str(Path(__file__).parent / "trust"))
from test_signing import Signer  # noqa: E402

CHILD = """sealflow: 1
name: notify
version: 1
owner: team:ops
permissions: [notify:send]
steps:
  - id: say
    set: {said: "'hi'"}
"""

CALLER = """sealflow: 1
name: report
version: 1
owner: team:ops
permissions: [notify:send]
steps:
  - id: tell
    call: {workflow: notify, version: 1, input: {who: "${{ input.who }}"}}
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def compiled(path: Path):
    result = check_file(path)
    return result.plan, [d for d in result.diagnostics if d.severity == "error"]


def test_the_callers_digest_pins_the_child_and_a_changed_child_changes_it(tmp_path):
    # Given a caller and the workflow it calls, side by side
    write(tmp_path, "notify.v1.yaml", CHILD)
    caller = write(tmp_path, "report.v1.yaml", CALLER)
    plan, errors = compiled(caller)
    assert not errors and plan is not None
    # Then the call pins the child's plan by its digest
    call = plan.step("tell").call
    assert call.workflow == "notify" and call.digest == call.plan.digest == call.plan.compute_digest()
    # When the child changes (one word of one step)
    write(tmp_path, "notify.v1.yaml", CHILD.replace("'hi'", "'hello'"))
    changed, _ = compiled(caller)
    # Then the caller's digest changes with it
    assert changed.digest != plan.digest and changed.step("tell").call.digest != call.digest


def test_a_stored_caller_whose_carried_child_was_altered_is_refused_on_load(tmp_path):
    # Given a compiled caller's plan JSON
    write(tmp_path, "notify.v1.yaml", CHILD)
    plan, _ = compiled(write(tmp_path, "report.v1.yaml", CALLER))
    body = json.loads(plan.to_json())
    # When the child plan it carries is altered (its pinned digest kept)
    body["steps"][0]["call"]["plan"]["steps"][0]["assign"] = {"said": "'forged'"}
    # Then loading it is refused: the carried plan is not what the pin says
    with pytest.raises(ValueError, match="pins notify v1"):
        Plan.from_json(json.dumps(body))


def test_a_call_step_takes_no_fields_of_an_action(tmp_path):
    # Given a call step that also declares a timeout and a retry
    write(tmp_path, "notify.v1.yaml", CHILD)
    caller = write(tmp_path, "report.v1.yaml", CALLER.replace(
        "    call:", "    timeout: 5s\n    retry: {max_attempts: 2}\n    call:"))
    _, errors = compiled(caller)
    # Then each is a located C418 naming the field
    assert {(e.code, e.message.split("take ")[1][:9]) for e in errors} >= {("C418", "'timeout'"), ("C418", "'retry': ")}


def test_a_call_inside_a_map_is_refused(tmp_path):
    # Given a map whose sub-flow calls a workflow
    write(tmp_path, "notify.v1.yaml", CHILD)
    caller = write(tmp_path, "report.v1.yaml", CALLER.replace("""  - id: tell
    call: {workflow: notify, version: 1, input: {who: "${{ input.who }}"}}
""", """  - id: each
    map:
      items: "input.people"
      concurrency: 2
      max_items: 10
      steps:
        - id: tell
          call: {workflow: notify, version: 1}
"""))
    _, errors = compiled(caller)
    # Then it is C419, saying to call one workflow that maps instead
    assert [e.code for e in errors] == ["C419"] and "map" in (errors[0].hint or "")


def test_a_cycle_through_another_workflow_is_refused(tmp_path):
    # Given report calls notify, and notify calls report back
    write(tmp_path, "notify.v1.yaml", CHILD.replace("""  - id: say
    set: {said: "'hi'"}""", """  - id: back
    call: {workflow: report, version: 1}"""))
    caller = write(tmp_path, "report.v1.yaml", CALLER)
    _, errors = compiled(caller)
    # Then the caller's call is a C430 that names the whole cycle
    assert [e.code for e in errors] == ["C430"] and "report v1 -> notify v1 -> report v1" in errors[0].message


def test_calls_nested_deeper_than_the_bound_are_refused(tmp_path):
    # Given a chain w0 -> w1 -> ... -> w6 (each calls the next)
    for n in range(7):
        body = CHILD.replace("name: notify", f"name: w{n}")
        if n < 6:
            body = body.replace("""  - id: say
    set: {said: "'hi'"}""", f"""  - id: next
    call: {{workflow: w{n + 1}, version: 1}}""")
        write(tmp_path, f"w{n}.v1.yaml", body)
    _, errors = compiled(tmp_path / "w0.v1.yaml")
    # Then compiling the first is refused as too deep
    assert [e.code for e in errors] == ["C430"] and "over the bound" in errors[0].message


def test_d635_a_changed_child_needs_review_and_its_own_findings_come_with_it(tmp_path):
    # Given a caller compiled against two versions of its child, the second adding a permission both declare
    write(tmp_path, "notify.v1.yaml", CHILD)
    old, _ = compiled(write(tmp_path, "report.v1.yaml", CALLER))
    write(tmp_path, "notify.v1.yaml", CHILD.replace("  - id: say\n", "  - id: say\n    permissions: [notify:send]\n"))
    new, _ = compiled(tmp_path / "report.v1.yaml")
    # When the two are diffed
    found = diff_plans(old, new)
    # Then D635 names the change of the called workflow, for review
    [d635] = [f for f in found if f.code == "D635"]
    assert d635.severity == "review" and d635.step == "tell" and "notify v1" in d635.message
    # and the child's own findings follow, each saying which call they come through
    inner = [f.message for f in found if f.code != "D635" and "called by step 'tell'" in f.message]
    assert "in notify (called by step 'tell'): permission added: notify:send" in inner
    # and the caller itself changed under the same version (its digest covers the child's): said too
    assert any("version is still 1" in f.message and "called by" not in f.message for f in found)


def test_a_signed_caller_is_trusted_only_with_its_child_signed_under_the_same_policy(tmp_path):
    # Given a caller signed by a key the policy trusts, and its child not signed
    write(tmp_path, "notify.v1.yaml", CHILD)
    caller = write(tmp_path, "report.v1.yaml", CALLER)
    signer = Signer(tmp_path)
    signer.sign(caller)
    # When verified, Then it is refused: the child is not signed
    with pytest.raises(Refused) as info:
        verify_file(caller, signer.policy)
    assert info.value.reason == "untrusted-child" and "not signed" in info.value.message
    # When the child is signed by a key the policy does not trust
    from sealflow.dsl.trust import signing

    signer.sign(tmp_path / "notify.v1.yaml", key=signing.generate_key())
    with pytest.raises(Refused) as info:
        verify_file(caller, signer.policy)
    assert info.value.reason == "untrusted-child" and "unknown-signer" in info.value.message
    # When the child is signed by the trusted key, Then the caller verifies
    signer.sign(tmp_path / "notify.v1.yaml")
    assert verify_file(caller, signer.policy).name == "report"
