"""Every workflow in definitions/ runs end to end through the command line, on the embedded default.

Given a definition, an input and the decisions a human makes at its approval gates,
when it is run with `sealflow run` (and `sealflow approve`), then it reaches the
expected end state and exit code, with the demo actions and the local model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sealflow.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEFINITIONS = ROOT / "definitions"

EXIT = {"completed": 0, "waiting": 3, "failed": 1}

# definitions declaring lock:/concurrency:, refused at submit while this build cannot enforce them
# (sealflow.runtime.honoured.NOT_YET); they run to their scenarios once it can
USES_LOCKS_OR_POOLS = {"document-ingestion.v1.yaml", "image-upload-pipeline.v1.yaml", "weekly-report.v1.yaml",
                       "support-triage.v1.yaml"}

# file -> list of (input, [approvers who approve in turn], expected final state, expected run error class)
SCENARIOS = {
    "lead-qualification.v1.yaml": [
        ({"lead_id": "lead_midco"}, [], "completed", None),
        ({"lead_id": "lead_tinycafe"}, [], "completed", None),
        ({"lead_id": "lead_acme"}, ["user:ben"], "completed", None),
    ],
    "document-ingestion.v1.yaml": [
        ({"document_id": "doc_handbook", "revision": 3, "visibility": "public"}, [], "completed", None),
        ({"document_id": "doc_pricing", "revision": 2, "visibility": "internal"}, [], "completed", None),
    ],
    "image-upload-pipeline.v1.yaml": [
        ({"image_id": "img_abc123", "uploader_id": "usr_alice", "object_key": "uploads/usr_alice/sunset.jpg",
          "content_type": "image/jpeg", "size_bytes": 2481152}, [], "completed", None),
        ({"image_id": "img_bad123", "uploader_id": "usr_mallory", "object_key": "uploads/usr_mallory/invoice.jpg",
          "content_type": "image/jpeg", "size_bytes": 96004}, [], "failed", "policy_denied"),
    ],
    "weekly-report.v1.yaml": [
        ({}, ["user:lee", "user:dana"], "completed", None),
    ],
    "lead-outreach.v1.yaml": [
        ({"lead_id": "lead_midco"}, ["user:ben"], "completed", None),   # approved as the model drafted it
    ],
    # the render waits for the provider's callback (`sealflow callbacks complete`; its test file completes it)
    "image-generation.v1.yaml": [
        ({"prompt": "a lighthouse at dawn", "requester": "usr_alice"}, [], "waiting", None),
    ],
    # the notification goes out through team-notification, called as a child run
    "ops-report.v1.yaml": [
        ({"owner": "usr_alice"}, [], "completed", None),
    ],
    "team-notification.v1.yaml": [
        ({"user_id": "usr_alice", "template": "report_ready", "key": "day-1"}, [], "completed", None),
    ],
    # the agent asks the demo carrier's MCP server (python -m sealflow.demo.mcp_carrier), pinned in the lock
    "shipment-check.v1.yaml": [
        ({"order_id": "ord_5600"}, [], "completed", None),   # both systems answer: the agent's answer
        ({"order_id": "ord_9999"}, [], "completed", None),   # neither knows it: handed to a person
    ],
    "support-triage.v1.yaml": [
        ({"ticket_id": "tkt_1001"}, [], "completed", None),   # the agent finds the order: a public reply
        ({"ticket_id": "tkt_1005"}, [], "completed", None),   # a prompt injection: handed to a human
    ],
}


def cli(capsys, *argv) -> tuple[int, dict]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_every_definition_has_a_scenario():
    assert sorted(p.name for p in DEFINITIONS.glob("*.yaml")) == sorted(SCENARIOS)


@pytest.mark.parametrize("name, scenario", [(n, s) for n, ss in SCENARIOS.items() for s in ss],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_given_a_definition_when_run_then_it_reaches_its_end_state(capsys, name, scenario):
    value, approvers, expected, error_class = scenario
    from sealflow.runtime.honoured import NOT_YET

    if name in USES_LOCKS_OR_POOLS and {"step.lock", "step.concurrency", "workflow.concurrency"} & set(NOT_YET):
        # Then a definition declaring a control this build cannot enforce is refused, not run unprotected
        code = main(["run", str(DEFINITIONS / name), "--input", json.dumps(value), "--json", "--as", "user:ana"])
        assert code == 2 and "which this deployment cannot enforce" in capsys.readouterr().err
        return
    # When it is run
    code, result = cli(capsys, "run", str(DEFINITIONS / name), "--input", json.dumps(value), "--json",
                       "--as", "service:weekly-report" if name.startswith("weekly") else "user:ana")
    for who in approvers:
        assert result["state"] == "waiting" and code == 3, result
        code, result = cli(capsys, "approve", result["run_id"], "--as", who, "--json")
    if name == "image-generation.v1.yaml":  # the demo provider renders: it calls back with the token it was given
        from sealflow.demo import rows

        (job,) = rows("render_jobs")
        code, result = cli(capsys, "callbacks", "complete", job["callback_token"], "--json", "--data",
                           json.dumps({"image_url": "https://render.demo.invalid/1.png", "width": 8, "height": 8}))
        # (then the run waits for the scanner's signed event, which comes through a server: its test file sends it)
        assert [s["id"] for s in result["steps"] if s["state"] == "waiting"] == ["verdict"], result["steps"]
        result["steps"] = [s for s in result["steps"] if s["state"] != "waiting"]
    # Then it ends where expected, with the exit code that says so
    assert result["state"] == expected, result
    assert code == EXIT[expected]
    assert (result.get("error") or {}).get("class") == error_class
    assert all(step["state"] in ("succeeded", "skipped", "failed") for step in result["steps"]), result["steps"]


def test_given_a_prompt_injection_ticket_when_triaged_then_no_reply_is_posted_and_a_human_takes_it(capsys):
    from sealflow.runtime.honoured import refuses

    if refuses("step.concurrency"):
        pytest.skip("support-triage declares concurrency:, refused at submit until pools are enforced")
    code, result = cli(capsys, "run", str(DEFINITIONS / "support-triage.v1.yaml"), "--input",
                       json.dumps({"ticket_id": "tkt_1005"}), "--json", "--as", "user:ana")
    ran = {step["id"] for step in result["steps"]}
    assert code == 0 and "escalate" in ran and "reply" not in ran, result["steps"]
