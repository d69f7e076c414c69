"""A failed action's traceback in the HTTP API's run detail and on the run's /ui page: shown to those who may
read the run (runs:read, or its initiator), never to anyone else, nor in what answers another operation."""

from __future__ import annotations

import pytest
from interp_helpers import S, approval, line_of, make_plan
from markupsafe import escape
from test_server_api import problem_of
from test_ui_pages import sign_in, token

from sealflow.dsl.plan import ErrorRoutePlan
from sealflow.execution.actions import action

HERE = "tests/interpreter/server/test_server_tracebacks.py"
SOURCE = "return {\"greeting\": f\"hello, {d['missing']}\"}"


@pytest.fixture
def greet(registry):
    @action("t.greet", registry=registry)
    def greet(ctx, name):
        d = {"name": name}
        return {"greeting": f"hello, {d['missing']}"}

    return greet


@pytest.fixture
def where(greet) -> str:
    return f"{HERE}:{line_of(greet.fn, 'missing')} in greet"


def failing_plan(**step):
    return make_plan(S("greet", "action", action="t.greet", args={"name": "ann"}, **step),
                     S("ask", "approval", approval=approval(show="input")), name="greet-flow")


def test_the_run_detail_shows_the_traceback_to_its_readers_only(client, mint, rt, greet, where):
    # Given alice's acme run whose action failed with a bug
    status = rt.run(failing_plan(), {}, initiator="user:alice", tenant="acme")
    assert status.state == "failed"
    run_id = status.run.id
    # When she (its initiator) and ida (an auditor: runs:read) read it
    for who in ("user:alice", "user:ida"):
        got = client.get(f"/v1/runs/{run_id}", headers=mint(who))
        # Then the failed step's error has its one-line message naming the file and line, and its traceback
        assert got.status_code == 200, got.text
        error = got.json()["steps"][0]["error"]
        assert error["message"] == f"KeyError: 'missing' ({where})"
        assert error["trace"].endswith(f"  {where}\n    {SOURCE}\nKeyError: 'missing'")
    # When bob (an acme manager without runs:read) and eve (another tenant) ask for it
    for who, tenant in (("user:bob", "acme"), ("user:eve", "globex")):
        got = client.get(f"/v1/runs/{run_id}", headers=mint(who, tenant))
        # Then it is an unknown run to them, and nothing of the traceback is in the answer
        problem_of(got, "not-found", 404)
        assert "missing" not in got.text and HERE not in got.text


def test_an_approval_answered_by_someone_who_may_not_read_the_run_carries_no_traceback(client, mint, rt, greet,
                                                                                       where):
    # Given alice's run whose action failed with a bug and routed on to an approval gate
    status = rt.run(failing_plan(on_error=(ErrorRoutePlan(errors=("internal",), next="ask"),)), {},
                    initiator="user:alice", tenant="acme")
    assert status.state == "waiting"
    run_id = status.run.id
    # When bob, a manager (he may decide the gate, not read the run), approves it through the API
    show_hash = rt.approvals_waiting("user:bob", "acme")[0]["show_hash"]
    got = client.post(f"/v1/approvals/{run_id}/ask", json={"decision": "approve", "payload_hash": show_hash},
                      headers=mint("user:bob"))
    # Then the answer shows the failed step's error without its traceback
    assert got.status_code == 200, got.text
    error = got.json()["steps"][0]["error"]
    assert error["message"] == f"KeyError: 'missing' ({where})" and "trace" not in error
    assert SOURCE not in got.text and "Traceback" not in got.text
    # while its initiator reading it sees the traceback
    shown = client.get(f"/v1/runs/{run_id}", headers=mint("user:alice")).json()
    assert shown["steps"][0]["error"]["trace"].endswith("KeyError: 'missing'")


def test_the_runs_page_shows_the_traceback_to_its_readers_only(client, rt, greet, where):
    # Given alice's acme run whose action failed with a bug
    run_id = rt.run(failing_plan(), {}, initiator="user:alice", tenant="acme").run.id
    # When ida (an auditor) opens its page
    sign_in(client, token(rt, "user:ida"))
    page = client.get(f"/ui/runs/{run_id}")
    # Then the step's error names the file and line, and its traceback is shown as preformatted text, escaped
    assert page.status_code == 200
    assert f"<td>internal: KeyError: {escape(repr('missing'))} ({where})</td>" in page.text
    assert f'<pre class="trace" id="trace-greet">Traceback (most recent call last):\n  {where}\n' in page.text
    assert escape(SOURCE) in page.text and SOURCE not in page.text
    # When bob (an acme manager without runs:read) opens it / Then there is no such run for him
    client.cookies.clear()
    sign_in(client, token(rt, "user:bob"))
    page = client.get(f"/ui/runs/{run_id}")
    assert page.status_code == 404 and "Traceback" not in page.text and HERE not in page.text
