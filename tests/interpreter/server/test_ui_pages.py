"""The /ui pages through FastAPI's test client: sign-in, sessions, CSRF, CSP, deciding a gate."""

from __future__ import annotations

import re

import pytest

from sealflow.server import tokens
from sealflow.server.ui.pages import CSP
from sealflow.server.ui.sessions import COOKIE


def token(rt, principal="user:bob", tenant="acme"):
    text, _ = tokens.create(rt.store, principal, tenant, rt.clock.now(), actor="user:root")
    return text


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def sign_in(client, text):
    page = client.get("/ui/signin")
    return client.post("/ui/signin", data={"csrf_token": csrf_of(page.text), "token": text}, follow_redirects=False)


@pytest.fixture
def waiting_run(client, mint, rt, notes):
    run_id = client.post("/v1/runs", json={"workflow": "approve-flow", "version": 1, "input": {"amount": 5}},
                         headers=mint()).json()["run_id"]
    rt.drive(run_id)
    return run_id


def test_signing_in_sets_a_server_side_session_cookie_never_the_token(client, rt):
    # Given an API token of bob's
    text = token(rt)
    # When bob signs in with it
    done = sign_in(client, text)
    # Then he is sent to his approvals with an HttpOnly, SameSite=Strict cookie that is not the token
    assert done.status_code == 303 and done.headers["location"] == "/ui/approvals"
    cookie = done.headers["set-cookie"]
    assert cookie.startswith(COOKIE + "=") and "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    assert text not in cookie and text.split("_")[-1] not in cookie
    page = client.get("/ui/approvals")
    assert page.status_code == 200 and "user:bob" in page.text
    assert page.headers["content-security-policy"] == CSP and "<script" not in page.text


def test_a_wrong_token_or_a_sign_in_without_its_csrf_token_is_refused(client, rt):
    # Given the sign-in page
    page = client.get("/ui/signin")
    # When a wrong token is sent, then a right one without the form's CSRF token
    wrong = client.post("/ui/signin", data={"csrf_token": csrf_of(page.text), "token": "sf_nope_nope"})
    forged = client.post("/ui/signin", data={"token": token(rt)}, follow_redirects=False)
    # Then neither signs in, and the failure is audited
    assert wrong.status_code == 401 and "sign-in refused" in wrong.text
    assert forged.status_code == 403 and COOKIE not in forged.headers.get("set-cookie", "")
    assert client.get("/ui/approvals", follow_redirects=False).headers["location"] == "/ui/signin"


def test_without_a_session_every_page_sends_to_sign_in(client):
    for path in ("/ui/approvals", "/ui/runs", "/ui/runs/run_x", "/ui"):
        got = client.get(path, follow_redirects=False)
        assert got.status_code == 303 and got.headers["location"] == "/ui/signin", path
    css = client.get("/ui/static/ui.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")


def test_an_approval_from_the_page_needs_the_csrf_token_and_the_hash_shown(client, rt, waiting_run):
    # Given bob signed in, with alice's run waiting at its gate
    sign_in(client, token(rt))
    page = client.get("/ui/approvals").text
    assert waiting_run in page and "user:alice" in page and "&#34;amount&#34;: 5" in page
    show_hash = re.search(r'name="payload_hash" value="([^"]+)"', page).group(1)
    url = f"/ui/approvals/{waiting_run}/ask"
    # When a post comes without the CSRF token, then with another payload hash, then as shown
    forged = client.post(url, data={"decision": "approve", "payload_hash": show_hash})
    stale = client.post(url, data={"csrf_token": csrf_of(page), "decision": "approve",
                                   "payload_hash": "sha256:" + "0" * 64})
    done = client.post(url, data={"csrf_token": csrf_of(page), "decision": "approve", "payload_hash": show_hash},
                       follow_redirects=False)
    # Then only the last counts
    assert forged.status_code == 403 and "CSRF" in forged.text
    assert stale.status_code == 409 and "not the one you reviewed" in stale.text
    assert done.status_code == 303
    assert rt.drive(waiting_run).state == "completed"
    sign_in(client, token(rt, "user:ida"))  # an auditor reads the run and its trail
    run_page = client.get(f"/ui/runs/{waiting_run}").text
    assert 'id="state" class="badge state-completed"' in run_page
    # the audit trail names bob, with the approval
    assert re.search(r'<strong>[a-z_.]*approv[a-z_.]*</strong>\s*by <span class="actor">user:bob</span>', run_page)


def test_the_initiator_cannot_approve_and_a_rejection_needs_a_reason(client, rt, waiting_run):
    # Given alice (who asked) signed in
    sign_in(client, token(rt, "user:alice"))
    page = client.get("/ui/approvals").text
    url = f"/ui/approvals/{waiting_run}/ask"
    csrf = csrf_of(page)
    show_hash = rt.approvals_waiting("user:bob", "acme")[0]["show_hash"]
    # When she approves her own run
    mine = client.post(url, data={"csrf_token": csrf, "decision": "approve", "payload_hash": show_hash})
    # Then it is refused with the reason, and the run still waits
    assert mine.status_code in (403, 409) and "refused" in mine.text
    assert rt.status(waiting_run).run.state == "waiting"


def test_signing_out_ends_the_session_and_other_tenants_runs_are_not_shown(client, rt, waiting_run):
    sign_in(client, token(rt, "user:carol", "globex"))
    assert waiting_run not in client.get("/ui/runs").text
    assert client.get(f"/ui/runs/{waiting_run}").status_code == 404
    csrf = csrf_of(client.get("/ui/runs").text)
    assert client.post("/ui/signout", data={"csrf_token": csrf}, follow_redirects=False).status_code == 303
    assert client.get("/ui/runs", follow_redirects=False).status_code == 303


def test_signing_in_and_out_are_audited_with_the_principal_and_the_method(client, rt):
    # Given bob signed in with an API token
    token_text = token(rt)
    sign_in(client, token_text)
    csrf = csrf_of(client.get("/ui/approvals").text)
    # When a forged sign-out comes without the CSRF token, then his own
    assert client.post("/ui/signout", data={}).status_code == 403
    assert client.post("/ui/signout", data={"csrf_token": csrf}, follow_redirects=False).status_code == 303
    # Then the trail has one sign-in and one sign-out, each naming bob, his tenant, the method and the token's id
    events = [e for e in rt.store.audit(None) if e.event in ("ui_signed_in", "ui_signed_out")]
    assert [(e.event, e.actor, e.detail["method"], e.detail["tenant"]) for e in events] == [
        ("ui_signed_in", "user:bob", "token", "acme"), ("ui_signed_out", "user:bob", "token", "acme")]
    assert events[0].detail["token"] == events[1].detail["token"] and events[1].detail["token"] in token_text
    # And the session id is in neither
    assert not any(v == client.cookies.get(COOKIE) for e in events for v in e.detail.values())


def test_a_rejection_from_the_page_needs_a_reason(client, rt, waiting_run):
    # Given bob signed in, looking at alice's gate
    sign_in(client, token(rt))
    page = client.get("/ui/approvals").text
    show_hash = re.search(r'name="payload_hash" value="([^"]+)"', page).group(1)
    url = f"/ui/approvals/{waiting_run}/ask"
    form = {"csrf_token": csrf_of(page), "decision": "reject", "payload_hash": show_hash}
    # When he rejects without a reason, then with one
    bare = client.post(url, data=form)
    done = client.post(url, data=dict(form, reason="over budget"), follow_redirects=False)
    # Then the first is refused, in the page's words (no command-line flag), and the second rejects the gate
    assert bare.status_code >= 400 and "refused: a rejection needs a reason" in bare.text
    assert "--reason" not in bare.text
    assert done.status_code == 303 and done.headers["location"] == "/ui/approvals?notice=rejected"
    assert rt.drive(waiting_run).state != "waiting"


def test_a_session_ends_when_idle_or_too_old_and_at_sign_out(rt, clock):
    from sealflow.server.ui.sessions import Sessions

    sessions = Sessions(rt.store, clock, idle=10, max_age=25)
    # Given a session in use every 9 seconds
    session = sessions.start("user:bob", "acme", "token")
    for _ in range(2):
        clock.advance(9)
        got = sessions.get(session.id)
        assert got is not None and (got.principal, got.csrf) == ("user:bob", session.csrf)
    # When it is older than max_age, or idle too long, or signed out
    clock.advance(9)
    assert sessions.get(session.id) is None
    idle = sessions.start("user:bob", "acme", "token")
    clock.advance(11)
    assert sessions.get(idle.id) is None
    ended = sessions.start("user:bob", "acme", "token")
    sessions.end(ended.id)
    # Then it is gone; CSRF tokens compare only equal values
    assert sessions.get(ended.id) is None and sessions.get(None) is None
    assert ended.csrf_ok(ended.csrf) and not ended.csrf_ok("") and not ended.csrf_ok(None)


def test_revoking_the_token_signed_in_with_ends_the_session(client, rt):
    # Given bob signed in with a token
    text = token(rt)
    sign_in(client, text)
    assert client.get("/ui/runs").status_code == 200
    # When the token is revoked
    rt.store.revoke_api_token(text.split("_")[1], rt.clock.now(), actor="user:root")
    # Then his next page sends him to sign in
    assert client.get("/ui/runs", follow_redirects=False).headers["location"] == "/ui/signin"


EDITABLE = b"""\
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
      editable:
        schema: {type: object, required: [subject, body], additionalProperties: false,
                 properties: {subject: {type: string}, body: {type: string}}}
"""


def test_an_editable_gate_is_corrected_from_the_page_and_a_bad_edit_changes_nothing(client, rt):
    # Given alice's run waiting at an editable review, and bob signed in
    from sealflow.dsl.api import compile_bytes

    run_id = rt.submit(compile_bytes(EDITABLE, "<outreach>"), {}, initiator="user:alice", tenant="acme")
    rt.drive(run_id)
    sign_in(client, token(rt))
    page = client.get("/ui/approvals").text
    assert 'name="edit"' in page and "buy now!!!" in page  # the field, filled with what the gate shows
    show_hash = re.search(r'name="payload_hash" value="([^"]+)"', page).group(1)
    url = f"/ui/approvals/{run_id}/review"
    # When he sends an edit that is not JSON, then one the schema refuses, then a right one
    garbled = client.post(url, data={"csrf_token": csrf_of(page), "decision": "approve", "payload_hash": show_hash,
                                     "edit": "{not json"})
    refused = client.post(url, data={"csrf_token": csrf_of(page), "decision": "approve", "payload_hash": show_hash,
                                     "edit": '{"subject": "Hi"}'})
    done = client.post(url, data={"csrf_token": csrf_of(page), "decision": "approve", "payload_hash": show_hash,
                                  "edit": '{"subject": "Hi", "body": "Thanks for your time."}'},
                       follow_redirects=False)
    # Then only the last counts, and the run goes on with the edited value
    assert garbled.status_code == 422 and "the edited payload is not JSON" in garbled.text
    assert refused.status_code == 409 and "editable schema" in refused.text
    assert done.status_code == 303, done.text
    finished = rt.drive(run_id, until="final")
    review = [a for a in finished.attempts if a.step_id == "review"][-1]
    assert finished.state == "completed" and review.output["show"] == {"subject": "Hi", "body": "Thanks for your time."}
