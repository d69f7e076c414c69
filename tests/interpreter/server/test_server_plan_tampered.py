"""The HTTP API and the /ui pages on a run whose stored plan is not what its digest says (issue 31).

Before, every act on such a run (approve, reject, resolve, cancel, redrive) answered 503 ``store-unavailable``
("try again shortly", ``Retry-After``): a client retried for ever what can never succeed. Now the run is shown
without what would come from its plan, saying why, and each act is a 409 ``plan-tampered`` problem naming the
plan; nothing changes."""

from __future__ import annotations

import re

import pytest
from plan_rows import forget_plans, tamper
from test_server_api import problem_of
from test_ui_pages import sign_in, token

from sealflow.store.records import RunQuery


def _submitted(client, mint) -> str:
    created = client.post("/v1/runs", json={"workflow": "approve-flow", "version": 1, "input": {"amount": 5}},
                          headers=mint("user:alice", "acme"))
    assert created.status_code == 201, created.text
    return created.json()["run_id"]


@pytest.fixture
def tampered_waiting(client, mint, rt, known):
    """A run of alice's waiting at its approval gate, whose plan row was then rewritten in the store."""
    run_id = _submitted(client, mint)
    assert rt.drive(run_id).state == "waiting"
    tamper(rt.store, known.digest)
    forget_plans(rt)
    return run_id


def test_given_a_waiting_run_whose_plan_was_tampered_when_it_is_read_then_it_is_shown_saying_so(
        client, mint, rt, known, tampered_waiting):
    ops = mint("user:ops", "acme")
    # When an operator reads it, its audit trail and the tenant's runs
    shown = client.get(f"/v1/runs/{tampered_waiting}", headers=ops)
    trail = client.get(f"/v1/runs/{tampered_waiting}/audit", headers=ops)
    listed = client.get("/v1/runs", headers=ops)
    # Then each answers: the run, its state as stored, and why it will not go on, in place of its wait
    assert shown.status_code == 200, shown.text
    body = shown.json()
    assert body["state"] == "waiting" and body["plan_digest"] == known.digest
    waiting = body["waiting"]
    assert waiting["kind"] == "plan_tampered" and waiting["step"] == "ask" and waiting["plan"] == known.digest
    assert "does not match its digest" in waiting["reason"] and "sealflow dlq redrive" in waiting["how"]
    assert trail.status_code == 200 and trail.json()
    assert listed.status_code == 200 and [r["run_id"] for r in listed.json()["runs"]] == [tampered_waiting]


def test_given_a_waiting_run_whose_plan_was_tampered_when_acted_on_then_409_plan_tampered_and_nothing_changes(
        client, mint, rt, known, tampered_waiting):
    ops, bob = mint("user:ops", "acme"), mint("user:bob", "acme")
    [gate] = client.get("/v1/approvals", headers=bob).json()
    before = rt.store.get_run(tampered_waiting)
    # When a manager approves it as shown, and an operator cancels, resolves and redrives it
    answers = {
        "approve": client.post(f"/v1/approvals/{tampered_waiting}/ask", headers=bob,
                               json={"decision": "approve", "payload_hash": gate["show_hash"]}),
        "reject": client.post(f"/v1/approvals/{tampered_waiting}/ask", headers=bob,
                              json={"decision": "reject", "reason": "no", "payload_hash": gate["show_hash"]}),
        "cancel": client.post(f"/v1/runs/{tampered_waiting}/cancel", headers=ops, json={"reason": "stop"}),
        "resolve": client.post(f"/v1/runs/{tampered_waiting}/resolve", headers=ops,
                               json={"decision": "retry", "reason": "checked"}),
        "redrive": client.post(f"/v1/dlq/{tampered_waiting}/redrive", headers=ops),
    }
    # Then each is a 409 plan-tampered problem naming the act, the run and the plan, never a 5xx
    for verb, answer in answers.items():
        body = problem_of(answer, "plan-tampered", 409)
        assert body["plan"] == known.digest, verb
        assert body["detail"].startswith(f"cannot {verb} run {tampered_waiting} (approve-flow v1): the stored plan")
        assert "nothing was changed" in body["detail"] and "restore that row" in body["detail"]
        assert "retry-after" not in answer.headers
    # And the run is as it was
    after = rt.store.get_run(tampered_waiting)
    assert (after.state, after.rev) == (before.state, before.rev) == ("waiting", before.rev)
    # And submitting the workflow by name (its stored plan is that row) is refused the same way, creating nothing
    again = client.post("/v1/runs", json={"workflow": "approve-flow", "version": 1, "input": {"amount": 5}},
                        headers=mint("user:alice", "acme"))
    assert problem_of(again, "plan-tampered", 409)["plan"] == known.digest
    assert [r.id for r in rt.store.query_runs(RunQuery(tenant="acme"))] == [tampered_waiting]


def test_given_a_run_the_engine_refused_for_its_tampered_plan_when_read_and_redriven_then_clear_answers(
        client, mint, rt, known):
    ops = mint("user:ops", "acme")
    # Given a queued run whose plan row was rewritten, which the engine then refused into the dead letters
    run_id = _submitted(client, mint)
    tamper(rt.store, known.digest)
    forget_plans(rt)
    assert rt.drive(run_id).state == "failed"
    # When an operator reads it and the dead letters, redrives it and cancels it
    shown = client.get(f"/v1/runs/{run_id}", headers=ops)
    letters = client.get("/v1/dlq", headers=ops)
    redrive = client.post(f"/v1/dlq/{run_id}/redrive", headers=ops)
    cancel = client.post(f"/v1/runs/{run_id}/cancel", headers=ops)
    # Then the run and its dead letter read with the reason, the redrive is refused as plan-tampered, and the
    # cancel as for any run that has ended
    assert shown.status_code == 200 and shown.json()["state"] == "failed"
    assert "[tampered]" in shown.json()["error"]["message"]
    assert letters.status_code == 200 and [d["run_id"] for d in letters.json()] == [run_id]
    problem_of(redrive, "plan-tampered", 409)
    problem_of(cancel, "invalid-operation", 409)


def test_given_a_run_whose_plan_was_tampered_when_its_ui_page_is_read_then_it_shows_the_run_and_why_not_the_graph(
        client, rt, known, tampered_waiting):
    # Given an auditor signed in to the /ui pages
    sign_in(client, token(rt, "user:ida"))
    # When she opens the run's page
    page = client.get(f"/ui/runs/{tampered_waiting}")
    # Then it shows the run, says why it will not go on, and shows nothing of its plan
    assert page.status_code == 200
    assert 'id="state" class="badge state-waiting"' in page.text
    refused = re.search(r'<p id="refused">([^<]*)</p>', page.text)
    assert refused is not None and "does not match its digest" in refused.group(1)
    assert "(not shown: the run&#39;s stored plan does not match its digest" in page.text


def test_given_a_gate_whose_run_plan_was_tampered_when_decided_on_the_ui_page_then_refused_with_the_reason(
        client, rt, tampered_waiting):
    # Given bob signed in, the gate of the tampered run listed for him
    sign_in(client, token(rt))
    page = client.get("/ui/approvals").text
    show_hash = re.search(r'name="payload_hash" value="([^"]+)"', page).group(1)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    # When he approves it from the page
    done = client.post(f"/ui/approvals/{tampered_waiting}/ask",
                       data={"csrf_token": csrf, "decision": "approve", "payload_hash": show_hash})
    # Then the page says it is refused and why (a 409, not a store outage), and the run still waits
    assert done.status_code == 409 and "refused: cannot approve run" in done.text
    assert "does not match its digest" in done.text
    assert rt.store.get_run(tampered_waiting).state == "waiting"
