"""POST /v1/events/{source}: the Standard Webhooks auth matrix, deduplication, per-key ordering, and a run
started as the trigger's run_as with the event as input."""

from __future__ import annotations

import base64
import json
import time

import pytest
from fastapi.testclient import TestClient
from interp_helpers import S, make_plan

from sealflow.execution.actions import action
from sealflow.runtime.config import RuntimeConfig
from sealflow.server import events
from sealflow.server.app import create_app
from sealflow.server.settings import ServerSettings

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


@pytest.fixture
def seen(registry):
    calls = []

    @action("t.seen", registry=registry)
    def record(ctx, lead=None):
        calls.append((ctx.run.initiator if hasattr(ctx, "run") else None, lead))
        return {"lead": lead}

    return calls


@pytest.fixture
def client(runtime, seen, monkeypatch):
    monkeypatch.setenv("SEALFLOW_SECRET_CRM_WEBHOOK_SECRET", SECRET)
    runtime.config = RuntimeConfig(extra={"events": {"sources": {"crm": {
        "secret": {"secret": "CRM_WEBHOOK_SECRET"}, "tenant": "default"}}}})
    plan = make_plan(S("note", "action", action="t.seen", args={"lead": "${{ input.lead }}"}), name="on-lead",
                     trigger={"event": {"type": "crm.lead.updated", "source": "crm", "run_as": "service:crm",
                                        "order": {"key": "input.lead", "sequence": "input.version"}}},
                     input_schema={"type": "object", "required": ["lead", "version"]})
    runtime.store.put_plan(plan.digest, plan.name, plan.version, plan.to_json(indent=None), runtime.clock.now())
    with TestClient(create_app(ServerSettings(rate=0, allow_open=True), runtime),
                    raise_server_exceptions=False) as c:
        yield c


def deliver(client, data, *, event_id="msg_1", timestamp=None, secret=SECRET, source="crm",
            event_type="crm.lead.updated"):
    body = json.dumps({"type": event_type, "data": data}).encode()
    stamp = int(time.time()) if timestamp is None else timestamp
    headers = {"webhook-id": event_id, "webhook-timestamp": str(stamp),
               "webhook-signature": events.sign(secret, event_id, stamp, body), "content-type": "application/json"}
    return client.post(f"/v1/events/{source}", content=body, headers=headers)


def test_a_signed_event_starts_the_definition_as_its_run_as(client, runtime):
    # When a correctly signed event arrives
    r = deliver(client, {"lead": "l1", "version": 1})
    # Then one run of the subscribed definition started, as the trigger's run_as, with the event as input
    assert r.status_code == 202, r.text
    (result,) = r.json()["results"]
    assert result["result"] == "started" and result["workflow"] == "on-lead"
    run = runtime.store.get_run(result["run_id"])
    assert run.input == {"lead": "l1", "version": 1} and run.acting == "service:crm"


def test_an_event_of_another_type_or_source_or_filtered_out_starts_nothing(client, runtime, registry):
    # Given a second definition on the same type with a filter, and one bound to another source
    def store(plan):
        runtime.store.put_plan(plan.digest, plan.name, plan.version, plan.to_json(indent=None), runtime.clock.now())

    store(make_plan(S("note", "action", action="t.seen", args={"lead": "${{ input.lead }}"}), name="big-leads",
                    trigger={"event": {"type": "crm.lead.updated", "run_as": "service:crm",
                                       "filter": "input.version > 5"}}))
    store(make_plan(S("note", "action", action="t.seen"), name="billing-only",
                    trigger={"event": {"type": "crm.lead.updated", "source": "billing", "run_as": "service:b"}}))
    # When an event of another type arrives, then one the filter rejects
    other = deliver(client, {"lead": "l1", "version": 1}, event_id="e1", event_type="crm.lead.deleted")
    small = deliver(client, {"lead": "l1", "version": 1}, event_id="e2")
    # Then the first matches nothing; the second starts on-lead only (big-leads filtered, billing-only not crm's)
    assert other.status_code == 202 and other.json()["results"] == []
    assert sorted((r["workflow"], r["result"]) for r in small.json()["results"]) == [
        ("big-leads", "filtered"), ("on-lead", "started")]


def test_a_replayed_delivery_outside_the_tolerance_is_refused(client, runtime):
    # Given a delivery captured ten minutes ago (signature valid for its old timestamp)
    r = deliver(client, {"lead": "l1", "version": 1}, timestamp=int(time.time()) - 600)
    # Then it is refused, and nothing ran
    assert r.status_code == 401 and "tolerance" in r.json()["detail"]
    assert runtime.store.list_runs() == []


def test_a_bad_signature_is_refused(client, runtime):
    other = "whsec_" + base64.b64encode(b"x" * 32).decode()
    r = deliver(client, {"lead": "l1", "version": 1}, secret=other)
    assert r.status_code == 401 and "signature" in r.json()["detail"]
    assert runtime.store.list_runs() == []


def test_a_duplicate_event_id_returns_the_first_answer(client, runtime):
    # Given an event delivered once
    first = deliver(client, {"lead": "l1", "version": 1}, event_id="msg_dup")
    # When the provider retries the same delivery
    again = deliver(client, {"lead": "l1", "version": 1}, event_id="msg_dup")
    # Then the answer is the first one, marked as a duplicate, and only one run exists
    assert again.json() == first.json() and again.headers["Sealflow-Event-Duplicate"] == "true"
    assert len(runtime.store.list_runs()) == 1


def test_an_out_of_order_sequence_is_recorded_and_not_run(client, runtime):
    # Given version 2 of lead l1 applied
    assert deliver(client, {"lead": "l1", "version": 2}, event_id="m2").json()["results"][0]["result"] == "started"
    # When version 1 arrives late
    late = deliver(client, {"lead": "l1", "version": 1}, event_id="m1")
    # Then it is recorded as out of order and no run starts; another key is independent
    assert late.status_code == 202
    assert late.json()["results"][0] == {"workflow": "on-lead", "version": 1, "result": "out_of_order",
                                         "sequence": 1, "applied": 2}
    assert runtime.store.event_answer("crm", "m1") == late.json()
    assert deliver(client, {"lead": "l2", "version": 1}, event_id="m3").json()["results"][0]["result"] == "started"
    assert len(runtime.store.list_runs()) == 2


def test_an_unknown_source_is_not_found(client, runtime):
    r = deliver(client, {"lead": "l1", "version": 1}, source="billing")
    assert r.status_code == 404 and "billing" in r.json()["detail"]
    assert runtime.store.list_runs() == []


def test_missing_headers_are_refused(client):
    r = client.post("/v1/events/crm", content=b"{}")
    assert r.status_code == 401


def test_events_send_signs_a_delivery_the_server_accepts(client, runtime, monkeypatch):
    # Given the CLI's HTTP call routed to the test server
    import urllib.request

    from click.testing import CliRunner

    from sealflow.cli import cli

    class Answer:
        def __init__(self, r):
            self.r = r

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def read(self):
            return self.r.content

    def urlopen(request, timeout=None):
        path = request.full_url.split("127.0.0.1:8300", 1)[1]
        return Answer(client.post(path, content=request.data, headers=dict(request.header_items())))

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    # When `sealflow events send` posts one event
    result = CliRunner().invoke(cli, ["events", "send", "crm", "crm.lead.updated", "--data",
                                       '{"lead": "l9", "version": 1}', "--secret", "CRM_WEBHOOK_SECRET"])
    # Then the server verified it and started a run
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["results"][0]["result"] == "started"


def test_given_an_invalid_events_section_when_serve_starts_then_it_stops_with_the_key_named(tmp_path, capsys):
    # Given a runtime configuration whose event source has an inline secret
    from sealflow.cli import main

    config = tmp_path / "runtime.yaml"
    config.write_text("events:\n  sources:\n    crm: {secret: inline-secret, tenant: acme}\n")
    # When the server starts, then it refuses at once naming the key, never serving a 500 later
    code = main(["--config", str(config), "serve", "--allow-open", "--store", f"sqlite:///{tmp_path}/s.db"])
    err = capsys.readouterr().err
    assert code == 2 and "events.sources.crm.secret" in err and "inline-secret" not in err


WAITS = b"""\
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
"""


def test_a_signed_event_resumes_the_run_waiting_for_it_and_a_repeat_changes_nothing(client, runtime):
    # Given a run waiting for a scanner's verdict (its events come through the crm source's tenant)
    from sealflow.dsl.api import compile_bytes

    waiting = runtime.run(compile_bytes(WAITS, "<scan-wait>"), {"file_id": "f1"}, initiator="user:a")
    assert waiting.state == "waiting"
    # When the verdict arrives, signed, and is delivered again
    first = deliver(client, {"file_id": "f1", "clean": True}, event_id="scan_1", event_type="scan.finished")
    again = deliver(client, {"file_id": "f1", "clean": True}, event_id="scan_1", event_type="scan.finished")
    # Then the run took it (the answer says so) and completed with the data; the repeat got the same answer
    assert first.status_code == 202, first.text
    assert first.json()["waiting"] == [{"run_id": waiting.run.id, "step": "verdict", "result": "taken"}]
    assert again.status_code == 202 and again.headers.get("Sealflow-Event-Duplicate") == "true"
    done = runtime.drive(waiting.run.id, until="final")
    assert done.state == "completed" and runtime.status(waiting.run.id).output is None
    assert [a.output for a in done.attempts if a.step_id == "verdict"] == [{"file_id": "f1", "clean": True}]


def test_a_signed_event_whose_data_fails_the_waiting_steps_schema_is_a_422_and_the_run_waits_on(client, runtime):
    from sealflow.dsl.api import compile_bytes

    waiting = runtime.run(compile_bytes(WAITS, "<scan-wait>"), {"file_id": "f1"}, initiator="user:a")
    r = deliver(client, {"file_id": "f1"}, event_id="scan_bad", event_type="scan.finished")
    assert r.status_code == 422 and r.json()["type"].endswith("invalid-event"), r.text
    assert "'clean' is a required property" in r.json()["detail"]
    assert runtime.status(waiting.run.id).state == "waiting"


CALLS_BACK = b"""\
sealflow: 1
name: render
version: 1
owner: team:t
steps:
  - id: generate
    action: t.handout
    callback: {timeout: 30m, schema: {type: object, required: [image_url]}}
"""


def test_a_callback_posted_to_its_url_completes_the_step_and_a_bad_one_is_a_404_or_422(client, runtime, registry):
    # Given a run whose action handed out its callback
    from sealflow.dsl.api import compile_bytes

    handed = []

    @action("t.handout", registry=registry)
    def handout(ctx):
        handed.append(ctx.callback.token)
        return {}

    waiting = runtime.run(compile_bytes(CALLS_BACK, "<render>"), {}, initiator="user:a")
    (token,) = handed
    # When a forged token, then a result failing the schema, then the right result are posted (no API token)
    forged = client.post(f"/v1/callbacks/{token[:-4]}AAAA", json={"data": {"image_url": "x"}})
    invalid = client.post(f"/v1/callbacks/{token}", json={"data": {"url": "x"}})
    done = client.post(f"/v1/callbacks/{token}", json={"data": {"image_url": "https://img/cat.png"}})
    again = client.post(f"/v1/callbacks/{token}", json={"data": {"image_url": "https://evil"}})
    # Then the forgery and the replay look like nothing waits (404), the invalid result is a 422, the right one done
    assert forged.status_code == 404 and again.status_code == 404, (forged.text, again.text)
    assert again.json()["instance"] == "/v1/callbacks/<token>" and token not in again.text  # (a capability)
    assert invalid.status_code == 422 and "'image_url' is a required property" in invalid.json()["detail"]
    assert done.status_code == 200 and done.json()["result"] == "completed", done.text
    assert runtime.drive(waiting.run.id, until="final").state == "completed"
