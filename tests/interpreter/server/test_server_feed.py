"""GET /v1/runs/{id}/events: a run's live feed as Server-Sent Events, authorised like the run, resumable with
Last-Event-ID, ended once the run is final."""

from __future__ import annotations

import json

from test_server_api import problem_of, submit


def read_feed(client, run_id, headers, last_event_id=None):
    """The feed's events as (id, event, data) until the stream ends."""
    extra = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    out, current = [], {}
    with client.stream("GET", f"/v1/runs/{run_id}/events", headers={**headers, **extra}) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line:
                if current:
                    out.append((current.get("id"), current.get("event"), json.loads(current.get("data", "null"))))
                current = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                current[key] = value
    return out


def test_the_feed_streams_a_finished_runs_events_then_ends_and_resumes_after_last_event_id(client, mint, rt):
    # Given alice's run, which waited for an approval and was cancelled
    alice = mint()
    run_id = submit(client, alice).json()["run_id"]
    rt.drive(run_id)
    rt.cancel(run_id, reason="no longer needed")
    assert rt.drive(run_id, until="final").state == "cancelled"
    # When she follows it
    events = read_feed(client, run_id, alice)
    # Then she gets every event of the run, its audit id as the SSE id, then an end event naming the final state
    names = [e for _, e, _ in events]
    assert names[0] == "run.created" and "run.cancelled" in names and names[-1] == "end"
    assert events[-1][2] == {"run_id": run_id, "state": "cancelled"}
    ids = [int(i) for i, _, _ in events[:-1]]
    assert ids == sorted(ids) and all(d["id"] == int(i) for i, _, d in events[:-1])
    assert all("detail" not in d for _, _, d in events[:-1])  # (the audit's detail needs audit:read)
    # And reconnecting with the id of the third event gives only what came after it
    resumed = read_feed(client, run_id, alice, last_event_id=ids[2])
    assert [int(i) for i, _, _ in resumed[:-1]] == ids[3:]


def test_another_tenants_member_cannot_follow_the_run(client, mint, rt):
    run_id = submit(client, mint()).json()["run_id"]
    problem_of(client.get(f"/v1/runs/{run_id}/events", headers=mint("user:eve", tenant="globex")), "not-found", 404)


def test_the_feed_of_a_waiting_run_follows_it_live_until_it_ends(client, mint, rt):
    # Given alice's run waiting for a manager's approval, and alice following it
    import threading

    alice = mint()
    run_id = submit(client, alice).json()["run_id"]
    rt.drive(run_id)
    got: list = []
    reader = threading.Thread(target=lambda: got.extend(read_feed(client, run_id, alice)))
    reader.start()
    # When bob approves while she follows
    rt.approve(run_id, actor="user:bob")
    rt.drive(run_id, until="final")
    reader.join(timeout=60)
    # Then her stream showed the approval and the end, and closed by itself
    assert not reader.is_alive()
    names = [e for _, e, _ in got]
    assert "run.completed" in names and names[-1] == "end"


def test_an_approver_edits_an_editable_gate_through_the_api(client, mint, rt, registry):
    # Given a run of alice's waiting at an editable review of a drafted email
    from sealflow.dsl.api import compile_bytes
    from sealflow.execution.actions import action

    sent = []

    @action("t.send", registry=registry, effect="write")
    def send(ctx, to, subject, body):
        sent.append(body)
        return {}

    plan = compile_bytes(b"""\
sealflow: 1
name: outreach
version: 1
owner: team:t
steps:
  - id: draft
    set: {subject: "'Hello'", body: "'buy now!!!'"}
  - id: review
    approval:
      approvers: [role:manager]
      timeout: 24h
      show: "steps.draft.output"
      editable: {schema: {type: object, required: [subject, body]}}
  - id: send
    action: t.send
    with: {to: "${{ input.to }}", subject: "${{ steps.review.output.show.subject }}",
           body: "${{ steps.review.output.show.body }}"}
""", "<outreach>")
    run_id = rt.submit(plan, {"to": "c@example.com"}, initiator="user:alice", tenant="acme")
    rt.drive(run_id)
    bob = mint("user:bob")
    (gate,) = [g for g in client.get("/v1/approvals", headers=bob).json() if g["run_id"] == run_id]
    # When bob approves it with the body fixed, bound to the payload he reviewed; then an edit failing the schema
    bad = client.post(f"/v1/approvals/{run_id}/review", headers=bob,
                      json={"decision": "approve", "payload_hash": gate["show_hash"], "edit": {"body": "no subject"}})
    good = client.post(f"/v1/approvals/{run_id}/review", headers=bob, json={
        "decision": "approve", "payload_hash": gate["show_hash"], "edit": {"subject": "Hi", "body": "Fixed."}})
    # Then the bad edit is refused and the good one sent
    assert bad.status_code == 409 and "editable schema" in bad.json()["detail"], bad.text
    assert good.status_code == 200, good.text
    rt.drive(run_id, until="final")
    assert sent == ["Fixed."]
