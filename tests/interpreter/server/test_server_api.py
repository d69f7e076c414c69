"""The HTTP API through FastAPI's test client: runs, approvals, dead letters, definitions, problems."""

from __future__ import annotations

import random

from fastapi.testclient import TestClient
from interp_helpers import S, make_plan

from sealflow.execution.actions import Registry, action
from sealflow.runtime.facade import Runtime
from sealflow.server.app import create_app
from sealflow.server.problems import TYPE_PREFIX


def problem_of(response, kind: str, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["type"] == TYPE_PREFIX + kind and body["status"] == status and body["detail"]
    return body


def submit(client, headers, **body):
    return client.post("/v1/runs", json={"workflow": "approve-flow", "version": 1, "input": {"amount": 5}, **body},
                       headers=headers)


def test_a_run_submitted_by_name_is_created_as_the_token_s_principal_and_tenant(client, mint, rt):
    # Given alice's token for acme
    alice = mint("user:alice", "acme")
    # When she submits a run by name (a body naming another initiator or tenant is refused outright)
    created = submit(client, alice)
    forged = submit(client, alice, initiator="user:bob")
    # Then the run is hers, in acme, unsigned in development mode, and the forged field is a 422
    assert created.status_code == 201, created.text
    run_id = created.json()["run_id"]
    assert created.headers["location"] == f"/v1/runs/{run_id}"
    run = rt.store.get_run(run_id)
    assert (run.initiator, run.tenant, run.signer) == ("user:alice", "acme", "unsigned")
    problem_of(forged, "invalid-request", 422)


def test_show_answers_the_same_json_as_status_json(client, mint, rt):
    from sealflow.runtime.status import status_json

    alice = mint()
    run_id = submit(client, alice).json()["run_id"]
    rt.drive(run_id)
    got = client.get(f"/v1/runs/{run_id}", headers=alice)
    # (as `sealflow status --json` prints it for its initiator: with what a reader sees of each step)
    assert got.status_code == 200 and got.json() == status_json(rt.status(run_id, tenant="acme", actor="user:alice"),
                                                                traces=True)
    assert got.json()["steps"][0]["history"][0]["state"] == "waiting"
    assert got.json()["state"] == "waiting" and got.json()["waiting"]["kind"] == "approval"


def test_the_same_idempotency_key_and_body_return_the_same_run_and_another_body_is_409(client, mint):
    alice = mint()
    key = {**alice, "Idempotency-Key": "order-42"}
    first = submit(client, key)
    again = submit(client, key)
    other = submit(client, key, input={"amount": 6})
    assert first.status_code == 201 and again.json()["run_id"] == first.json()["run_id"]
    problem_of(other, "idempotency-conflict", 409)


def test_an_unknown_definition_and_an_unknown_run_are_404_problems(client, mint):
    alice = mint()
    problem_of(client.post("/v1/runs", json={"workflow": "nope"}, headers=alice), "not-found", 404)
    problem_of(client.get("/v1/runs/run_0000", headers=alice), "not-found", 404)
    problem_of(client.get("/v1/nowhere", headers=alice), "not-found", 404)
    problem_of(client.delete("/v1/runs", headers=alice), "method-not-allowed", 405)


def test_another_tenant_s_run_reads_exactly_like_an_unknown_one(client, mint):
    run_id = submit(client, mint("user:alice", "acme")).json()["run_id"]
    eve = mint("user:eve", "globex")
    theirs = problem_of(client.get(f"/v1/runs/{run_id}", headers=eve), "not-found", 404)
    unknown = problem_of(client.get("/v1/runs/run_ffff", headers=eve), "not-found", 404)
    assert theirs["detail"].replace(run_id, "X") == unknown["detail"].replace("run_ffff", "X")
    problem_of(client.post(f"/v1/runs/{run_id}/cancel", headers=eve), "not-found", 404)
    problem_of(client.get(f"/v1/runs/{run_id}/audit", headers=eve), "not-found", 404)
    assert client.get("/v1/runs", headers=eve).json()["runs"] == []


def test_runs_are_listed_by_filters_in_keyset_pages(client, mint):
    alice = mint()
    ids = [submit(client, alice, input={"amount": i}).json()["run_id"] for i in range(5)]
    seen, cursor = [], None
    while True:
        page = client.get("/v1/runs", params={"limit": 2, **({"cursor": cursor} if cursor else {})}, headers=alice)
        assert page.status_code == 200, page.text
        seen += [r["run_id"] for r in page.json()["runs"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 5
    assert len(client.get("/v1/runs", params={"workflow": "approve-flow", "state": "queued"},
                          headers=alice).json()["runs"]) == 5
    assert client.get("/v1/runs", params={"initiator": "user:bob"}, headers=alice).json()["runs"] == []
    assert client.get("/v1/runs", params={"tenant": "globex"}, headers=alice).json()["runs"] == []
    problem_of(client.get("/v1/runs", params={"state": "bogus"}, headers=alice), "invalid-request", 422)
    problem_of(client.get("/v1/runs", params={"cursor": "!!"}, headers=alice), "invalid-request", 422)


def test_an_approval_is_bound_to_the_payload_hash_the_approver_saw(client, mint, rt, notes):
    # Given a run of alice's waiting at its approval gate
    run_id = submit(client, mint()).json()["run_id"]
    rt.drive(run_id)
    bob = mint("user:bob")
    (gate,) = client.get("/v1/approvals", headers=bob).json()
    assert gate["run_id"] == run_id and gate["show"] == {"amount": 5}
    url = f"/v1/approvals/{run_id}/{gate['step']}"
    # When bob sends a decision over another payload hash, then over the one shown
    stale = client.post(url, json={"decision": "approve", "payload_hash": "sha256:" + "0" * 64}, headers=bob)
    done = client.post(url, json={"decision": "approve", "payload_hash": gate["show_hash"]}, headers=bob)
    # Then the first is refused (nothing decided) and the second counts
    problem_of(stale, "payload-changed", 409)
    assert done.status_code == 200, done.text
    assert rt.drive(run_id).state == "completed" and notes == ["approved"]


def test_the_initiator_cannot_approve_and_a_rejection_needs_a_reason(client, mint, rt):
    alice = mint()
    run_id = submit(client, alice).json()["run_id"]
    rt.drive(run_id)
    shown = rt.status(run_id).waiting
    url = f"/v1/approvals/{run_id}/{shown['step']}"
    problem_of(client.post(url, json={"decision": "approve", "payload_hash": shown["show_hash"]}, headers=alice),
               "forbidden", 403)
    bob = mint("user:bob")
    problem_of(client.post(url, json={"decision": "reject", "payload_hash": shown["show_hash"]}, headers=bob),
               "invalid-operation", 409)
    rejected = client.post(url, json={"decision": "reject", "reason": "no", "payload_hash": shown["show_hash"]},
                           headers=mint("user:bob"))
    assert rejected.status_code == 200 and rt.drive(run_id).state == "failed"


def test_cancel_audit_dlq_and_definitions(client, mint, rt):
    alice = mint()
    run_id = submit(client, alice).json()["run_id"]
    rt.drive(run_id)
    cancelled = client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "changed my mind"}, headers=alice)
    assert cancelled.status_code == 200, cancelled.text
    assert rt.drive(run_id).state in ("cancelled", "cancelling")
    # the initiator may cancel their run, but reading its audit trail needs audit:read (ida, an auditor)
    problem_of(client.get(f"/v1/runs/{run_id}/audit", headers=alice), "not-found", 404)
    trail = client.get(f"/v1/runs/{run_id}/audit", headers=mint("user:ida")).json()
    assert any(e["event"].startswith("run.") for e in trail)
    assert client.get("/v1/dlq", headers=alice).json() == []
    problem_of(client.post(f"/v1/dlq/{run_id}/redrive", headers=mint("user:ops")), "invalid-operation", 409)
    # the definition registry is every tenant's: under an access policy, for its operators only
    problem_of(client.get("/v1/definitions", headers=alice), "forbidden", 403)


def test_bodies_are_bounded_and_validated(rt, known):
    from fastapi.testclient import TestClient

    from sealflow.server import tokens
    from sealflow.server.app import create_app
    from sealflow.server.settings import ServerSettings

    text, _ = tokens.create(rt.store, "user:alice", "acme", rt.clock.now(), actor="user:root")
    alice = {"Authorization": f"Bearer {text}"}
    with TestClient(create_app(ServerSettings(rate=0, max_body=2048), rt), raise_server_exceptions=False) as client:
        big = client.post("/v1/runs", json={"workflow": "approve-flow", "input": {"x": "y" * 4096}}, headers=alice)
        problem_of(big, "body-too-large", 413)
        problem_of(client.post("/v1/runs", content=b"{not json", headers={**alice, "content-type": "application/json"}),
                   "invalid-request", 422)
        problem_of(client.post("/v1/runs", content=b'{"workflow": "approve-flow", "input": NaN}',
                               headers={**alice, "content-type": "application/json"}), "invalid-request", 422)
        problem_of(client.post("/v1/runs", json={"workflow": "approve-flow", "version": 0}, headers=alice),
                   "invalid-request", 422)


def test_health_readiness_and_the_openapi_document_need_no_credential(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
    doc = client.get("/openapi.json").json()
    assert {"/v1/runs", "/v1/runs/{run_id}", "/v1/approvals/{run_id}/{step_id}", "/v1/dlq/{run_id}/redrive"} <= set(
        doc["paths"])


def test_readiness_fails_naming_a_secret_an_action_needs_never_its_value(rt, known, settings, registry, monkeypatch):
    # Given an action of this server that declares a secret no provider holds
    monkeypatch.delenv("SEALFLOW_SECRET_CRM_TOKEN", raising=False)
    action("t.crm", registry=registry, secrets=["crm_token"])(lambda ctx: {})
    with TestClient(create_app(settings, rt), raise_server_exceptions=False) as client:
        # When /readyz is asked, Then it is a 503 naming the secret, where it is declared and how to set it
        problem = problem_of(client.get("/readyz"), "not-ready", 503)
        assert "secret 'crm_token' (declared by action 't.crm') is not set" in problem["detail"]
        assert ".py" not in problem["detail"]  # no file path of the server for an anonymous caller
        assert "SEALFLOW_SECRET_CRM_TOKEN" in problem["detail"]
        # And once the secret is set, the server is ready, and its value appears nowhere in the answer
        monkeypatch.setenv("SEALFLOW_SECRET_CRM_TOKEN", "tok-9f8e7d6c5b4a")
        answer = client.get("/readyz")
        assert answer.json() == {"status": "ready"} and "tok-9f8e7d6c5b4a" not in answer.text


def test_readiness_fails_naming_a_notification_channel_s_missing_secret_never_its_value(rt, known, settings,
                                                                                        monkeypatch):
    # Given a server whose runtime delivers approval notifications to a Slack channel whose URL is a secret no
    # provider holds, and to a webhook whose signing secret is missing too
    from sealflow.operations import notifications
    from sealflow.runtime.config import RuntimeConfig

    for name in ("SEALFLOW_SECRET_RDY_SLACK_URL", "SEALFLOW_SECRET_RDY_HOOK_SECRET"):
        monkeypatch.delenv(name, raising=False)
    rt.config = RuntimeConfig.from_dict({"notifications": {"channels": {
        "finance": {"kind": "slack", "url": {"secret": "RDY_SLACK_URL"}},
        "ops": {"kind": "webhook", "url": "https://hooks.example.com/x", "secret": {"secret": "RDY_HOOK_SECRET"}}}}},
        source="/etc/sealflow/runtime.yaml")
    rt.notify = notifications.load(rt.config)
    with TestClient(create_app(settings, rt), raise_server_exceptions=False) as client:
        # When /readyz is asked, Then it is a 503 naming each secret and its channel, without the file's path
        problem = problem_of(client.get("/readyz"), "not-ready", 503)
        assert "secret 'RDY_SLACK_URL' (url of notification channel 'finance' (notifications.channels.finance)) " \
               "is not set: set SEALFLOW_SECRET_RDY_SLACK_URL" in problem["detail"]
        assert "secret 'RDY_HOOK_SECRET' (signing secret of notification channel 'ops'" in problem["detail"]
        assert "/etc/sealflow" not in problem["detail"]
        # And once both are set, the server is ready, and neither value appears in the answer
        monkeypatch.setenv("SEALFLOW_SECRET_RDY_SLACK_URL", "https://hooks.slack.com/services/T/B/RDYSLACKTOKEN")
        monkeypatch.setenv("SEALFLOW_SECRET_RDY_HOOK_SECRET", "whsec_cmR5LXNpZ25pbmcta2V5")
        answer = client.get("/readyz")
        assert answer.json() == {"status": "ready"} and "RDYSLACKTOKEN" not in answer.text


def test_text_no_store_holds_in_a_request_is_refused_or_kept_replaced_never_a_500(client, mint, rt):
    # Given JSON bodies whose strings hold a lone surrogate escape (valid JSON, not valid Unicode) or a NUL
    alice, bob = mint(), mint("user:bob")
    as_json = {"content-type": "application/json"}
    # When a run is submitted with a lone surrogate in its input / Then it is refused as invalid input, naming
    # where
    refused = client.post("/v1/runs", content=b'{"workflow": "approve-flow", "input": {"amount": 5, "note": '
                                              b'"x\\ud800"}}', headers={**alice, **as_json})
    assert "not valid Unicode at input.note" in problem_of(refused, "invalid-input", 422)["detail"]
    assert rt.store.list_runs(limit=10) == []
    # When a waiting run is rejected or cancelled with a lone surrogate in the reason / Then each is refused,
    # saying where, and the run still waits
    run_id = submit(client, alice).json()["run_id"]
    rt.drive(run_id)
    shown = rt.status(run_id).waiting
    url = f"/v1/approvals/{run_id}/{shown['step']}"

    def reject(reason: bytes):
        return client.post(url, content=b'{"decision": "reject", "reason": "' + reason + b'", "payload_hash": "'
                           + shown["show_hash"].encode() + b'"}', headers={**bob, **as_json})

    assert "body/reason" in problem_of(reject(b"no \\ud800"), "invalid-request", 422)["detail"]
    problem_of(client.post(f"/v1/runs/{run_id}/cancel", content=b'{"reason": "stop \\ud800"}',
                           headers={**alice, **as_json}), "invalid-request", 422)
    assert rt.status(run_id).run.state == "waiting"
    # When it is rejected with a NUL in the reason / Then the decision counts, the NUL kept replaced
    assert reject(b"no \\u0000 way").status_code == 200
    status = rt.drive(run_id)
    assert status.state == "failed" and "no \ufffd way" in status.run.error_message


def test_a_step_a_worker_took_and_left_is_shown_with_who_left_it_and_what_it_lacks(client, mint, rt, notes, clock):
    # Given a workflow whose first step calls t.note, and a worker process on the same store that lacks it
    plan = make_plan(S("act", "action", action="t.note", args={"text": "hi"}), name="act-flow")
    rt.store.put_plan(plan.digest, plan.name, plan.version, plan.to_json(indent=None), clock.now())
    worker = Runtime(rt.store, Registry(), {}, clock=clock, rng=random.Random(3), worker_timeout_ms=20,
                     access=rt.access, owner="otherhost:77:1")
    try:
        alice = mint()
        run_id = client.post("/v1/runs", json={"workflow": "act-flow", "version": 1, "input": {}},
                             headers=alice).json()["run_id"]
        # When the worker takes its message and leaves it
        worker.drive(run_id)
        # Then GET /v1/runs/{id} says the run waits for a process that has the action, and who left it
        shown = client.get(f"/v1/runs/{run_id}", headers=alice)
        assert shown.status_code == 200, shown.text
        waiting = shown.json()["waiting"]
        assert waiting["kind"] == "process" and waiting["step"] == "act"
        assert waiting["left_by"] == ["worker:otherhost:77:1"] and waiting["lacks"] == [["action", "t.note"]]
        assert waiting["lacks_here"] is None  # the API process does not execute steps: only what the store says
    finally:
        worker.close()


def test_a_body_json_cannot_read_is_a_400_saying_what_the_api_reads_never_a_500(client, mint):
    alice = {**mint(), "content-type": "application/json"}
    # Given bodies a fuzzer sends: nested past any parser, not UTF-8, a number of 5,000 digits, not JSON at all
    bodies = [b'{"workflow": "approve-flow", "version": 1, "input": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
              b'{"workflow": "approve-flow", "version": 1, "input": {"a": "\xff\xfe"}}',
              b'{"workflow": "approve-flow", "version": 1, "input": {"a": ' + b"9" * 5000 + b"}}"]
    for body in bodies:
        # When each is posted / Then a 400 problem says what the API reads
        got = client.post("/v1/runs", content=body, headers=alice)
        problem = problem_of(got, "http-error", 400)
        assert problem["detail"].startswith("the request body is not JSON this API can read"), problem
    # And text that is not JSON at all is a 422 saying so, where
    problem = problem_of(client.post("/v1/runs", content=b"{workflow: approve-flow", headers=alice),
                         "invalid-request", 422)
    assert problem["detail"] == "body/1: JSON decode error"


def test_a_lost_attempts_unknown_outcome_is_decided_through_the_api_by_a_holder_of_runs_resolve(client, mint, rt,
                                                                                                registry):
    # Given an acme run whose SMS action (its gateway cannot deduplicate) lost its attempt mid-call
    sent = []

    @action("t.sms", registry=registry, effect="irreversible", honours_idempotency_key=False)
    def sms(ctx):
        sent.append(ctx.fence)
        return {"sent": True}

    plan = make_plan(S("text", "action", action="t.sms"), output="${{ steps.text.output }}")
    run_id = rt.submit(plan, {}, initiator="user:alice", tenant="acme")
    (message,) = rt.store.take_outbox(rt.clock.now())
    rt.store.claim(*message, owner="gone", now=rt.clock.now())
    rt.clock.advance(3600)
    rt.sweeper.sweep()
    for m in rt.store.take_outbox(rt.clock.now()):
        rt.engine.handle(*m)
    shown = client.get(f"/v1/runs/{run_id}", headers=mint("user:ops")).json()
    assert shown["state"] == "waiting" and shown["waiting"]["kind"] == "outcome_unknown" and sent == []
    # When its initiator (no runs:resolve) decides, an outsider does, and a body lacks its reason
    problem_of(client.post(f"/v1/runs/{run_id}/resolve", json={"decision": "retry", "reason": "x"},
                           headers=mint("user:alice")), "not-found", 404)
    problem_of(client.post(f"/v1/runs/{run_id}/resolve", json={"decision": "retry", "reason": "x"},
                           headers=mint("user:eve", "globex")), "not-found", 404)
    assert client.post(f"/v1/runs/{run_id}/resolve", json={"decision": "succeeded"},
                       headers=mint("user:ops")).status_code == 422
    # Then nothing changed; an operator of acme marks it succeeded with the output the gateway's log shows
    decided = client.post(f"/v1/runs/{run_id}/resolve", headers=mint("user:ops"),
                          json={"decision": "succeeded", "reason": "gateway log: delivered", "output": {"sent": True}})
    assert decided.status_code == 200, decided.text
    assert rt.drive(run_id).state == "completed" and rt.store.get_run(run_id).output == {"sent": True}
    assert sent == []


def test_runs_submitted_with_tags_are_found_by_them_and_show_them(client, mint, rt):
    # Given alice submits two runs with a customer's tag, one without, and one with a tag that is no name
    alice = mint("user:alice", "acme")
    tagged = [submit(client, alice, tags={"customer": "c-42", "batch": 3}).json()["run_id"] for _ in range(2)]
    submit(client, alice)
    bad = submit(client, alice, tags={"Customer": "c-42"})
    # Then the bad one is refused (nothing created), and the tagged runs are listed by their tags
    assert "is not a name" in problem_of(bad, "invalid-input", 422)["detail"]
    assert len(rt.store.list_runs()) == 3
    found = client.get("/v1/runs", params=[("tag", "customer=c-42"), ("tag", "batch=3")], headers=alice).json()
    assert sorted(r["run_id"] for r in found["runs"]) == sorted(tagged)
    assert client.get(f"/v1/runs/{tagged[0]}", headers=alice).json()["tags"] == {"batch": "3", "customer": "c-42"}
    problem_of(client.get("/v1/runs", params={"tag": "customer"}, headers=alice), "invalid-request", 422)
