"""A run's /ui page through FastAPI's test client: the step table (kind, duration, worker, error), the action's
traceback and the model's answer, the graph as SVG coloured by state and linked to each step, budgets, the
audit trail grouped by step; cancel and redrive for operators only, each needing the CSRF token and a
confirmation; the page's live feed on the session."""

from __future__ import annotations

import re

import pytest
from interp_helpers import FakeProvider, S, make_plan
from test_ui_pages import csrf_of, sign_in, token

from sealflow.dsl.plan import AiPlan, BudgetPlan
from sealflow.execution.actions import action
from sealflow.server.ui.pages import CSP


@pytest.fixture
def failing(rt, registry):
    """A run of alice's that failed: its model step answered ``{"label": "hot"}``, then ``t.file`` raised a
    KeyError (it succeeds when run again)."""
    calls = []

    @action("t.file", registry=registry)
    def file(ctx, label):
        calls.append(label)
        if len(calls) == 1:
            return {"filed": {}[label]}
        return {"filed": label}

    rt.providers["fake"] = FakeProvider({"label": "hot"}, tokens=40)
    plan = make_plan(S("classify", "ai", ai=AiPlan(model="fake", prompt_template="Classify",
                                                   prompt_ref={"id": "prompts/classify.md", "version": "2"})),
                     S("file", "action", action="t.file", args={"label": "${{ steps.classify.output.label }}"}),
                     name="lead-flow", budget=BudgetPlan(max_tokens=1000))
    run_id = rt.submit(plan, {"lead": 7}, initiator="user:alice", tenant="acme")
    assert rt.drive(run_id).state == "failed"
    return run_id


def test_the_run_page_shows_steps_traceback_answer_graph_budgets_and_trail(client, rt, failing):
    # Given an auditor signed in
    sign_in(client, token(rt, "user:ida"))
    # When she opens the failed run's page
    got = client.get(f"/ui/runs/{failing}")
    page = got.text
    # Then the step table has each step's kind, state, duration and worker, and the failing step's error
    assert got.status_code == 200 and got.headers["content-security-policy"] == CSP
    rows = re.findall(r'<tr data-step="([^"]+)"><td><a href="#step-[^"]+">[^<]+</a></td><td>([^<]*)</td>', page)
    assert rows == [("classify", "ai"), ("file", "action")]
    assert re.search(r'<td class="worker">[^<]+</td>', page)
    assert "<strong>internal</strong>: KeyError" in page
    # And the traceback is folded under the failing step, and the model's answer under the model step
    assert re.search(r'<details class="trace-box" open><summary>[^<]+</summary>\s*<pre class="trace" id="trace-file">'
                     r'Traceback', page)
    assert re.search(r'<pre class="output" id="output-classify">\{\s*&#34;label&#34;: &#34;hot&#34;\s*\}</pre>', page)
    assert "prompts/classify.md v2" in page
    # And the graph is SVG, each node coloured by its state and linked to its step's section
    assert '<svg xmlns="http://www.w3.org/2000/svg" id="graph"' in page
    assert re.search(r'<a href="#step-file" data-step="file"><title>file: failed \(t.file\)</title>.*?'
                     r'class="node state-failed"', page)
    assert 'id="step-file"' in page and 'id="step-classify"' in page
    # And the budget used against its limit, and the audit trail grouped by step with its details folded
    assert re.search(r"<td>tokens</td><td>40</td><td>1000</td>", page)
    assert '<section class="audit-group" aria-label="audit events of file">' in page
    assert "<details><summary>detail</summary>" in page
    # And an auditor is offered neither cancel nor redrive
    assert 'id="redrive-form"' not in page and 'id="cancel-form"' not in page


def test_an_operator_redrives_from_the_page_with_a_confirmation_and_the_csrf_token(client, rt, failing):
    # Given the operator signed in, on the failed run's page, which offers a redrive
    sign_in(client, token(rt, "user:ops"))
    page = client.get(f"/ui/runs/{failing}").text
    assert 'id="redrive-form"' in page and 'id="cancel-form"' not in page
    url = f"/ui/runs/{failing}/redrive"
    # When the form is posted without the CSRF token, then without the confirmation, then as the page makes it
    forged = client.post(url, data={"confirm": "yes"})
    unconfirmed = client.post(url, data={"csrf_token": csrf_of(page)})
    still = rt.status(failing).state
    done = client.post(url, data={"csrf_token": csrf_of(page), "confirm": "yes"}, follow_redirects=False)
    # Then only the last redrives, and the run completes
    assert forged.status_code == 403 and "CSRF" in forged.text
    assert unconfirmed.status_code == 422 and "nothing was done" in unconfirmed.text and still == "failed"
    assert done.status_code == 303 and done.headers["location"] == f"/ui/runs/{failing}?notice=redriven"
    assert rt.drive(failing).state == "completed"
    assert "Redriven" in client.get(done.headers["location"]).text


def test_a_redrive_the_policy_refuses_changes_nothing(client, rt, failing):
    # Given the auditor signed in, who may read but not redrive
    sign_in(client, token(rt, "user:ida"))
    page = client.get(f"/ui/runs/{failing}").text
    # When she posts a redrive anyway (the page offered none)
    got = client.post(f"/ui/runs/{failing}/redrive", data={"csrf_token": csrf_of(page), "confirm": "yes"})
    # Then it is refused like an unknown run, and the run is still failed
    assert got.status_code == 404 and "the Runs page lists the runs you may see" in got.text
    assert "`sealflow" not in got.text  # (the page's words, not a command's)
    assert rt.status(failing).state == "failed"


@pytest.fixture
def waiting(rt, known):
    """A run of alice's waiting at its approval gate."""
    run_id = rt.submit(known, {"amount": 5}, initiator="user:alice", tenant="acme")
    assert rt.drive(run_id).state == "waiting"
    return run_id


def test_the_initiator_cancels_a_waiting_run_with_a_reason(client, rt, waiting):
    # Given alice on her waiting run's page (an initiator may cancel her own run)
    sign_in(client, token(rt, "user:alice"))
    waiting_run = waiting
    page = client.get(f"/ui/runs/{waiting_run}").text
    assert 'id="cancel-form"' in page and 'id="redrive-form"' not in page
    # When she cancels it with a reason and the confirmation
    done = client.post(f"/ui/runs/{waiting_run}/cancel", data={"csrf_token": csrf_of(page), "confirm": "yes",
                                                               "reason": "wrong amount"}, follow_redirects=False)
    # Then the run is cancelled and the reason is in its audit trail
    assert done.status_code == 303
    assert rt.status(waiting_run).state in ("cancelled", "cancelling")
    assert any("wrong amount" in str(a.detail) for a in rt.store.audit(waiting_run))


def test_the_pages_feed_follows_the_run_on_the_session_only(client, rt, failing):
    # Given the failed (final) run, and no session
    anonymous = client.get(f"/ui/runs/{failing}/events")
    # When an auditor signed in follows its page's feed
    sign_in(client, token(rt, "user:ida"))
    with client.stream("GET", f"/ui/runs/{failing}/events") as stream:
        text = "".join(stream.iter_text())
    # Then she gets its audit events, unnamed, then the named end; without a session, nothing
    assert "event: end" in text and '"to":"failed"' in text.replace(" ", "")
    assert "event: step." not in text
    assert "data:" not in anonymous.text


def test_a_long_run_shows_sections_only_for_the_steps_that_need_one(client, rt, failing, monkeypatch):
    # Given pages that give at most one step a section of its own, and an auditor signed in
    from sealflow.server.ui import runview

    monkeypatch.setattr(runview, "MAX_SECTIONS", 1)
    sign_in(client, token(rt, "user:ida"))
    # When she opens the failed run (two steps that both need a section), then asks for its failing step
    first = client.get(f"/ui/runs/{failing}").text
    asked = client.get(f"/ui/runs/{failing}", params={"step": "file"}).text
    # Then the first page has one section, says so, and links the other step to a page that shows it
    assert 'id="step-classify"' in first and 'id="step-file"' not in first
    assert '1 of the 2 steps' in first and 'href="?step=file#step-file"' in first
    assert 'id="step-file"' in asked and 'id="trace-file"' in asked


def test_a_large_plan_is_drawn_when_asked(client, rt, failing, monkeypatch):
    # Given pages that draw plans of at most one step at once, and an auditor signed in
    from sealflow.server.ui import runs

    monkeypatch.setattr(runs, "MAX_DRAWN", 1)
    sign_in(client, token(rt, "user:ida"))
    # When she opens the failed run (two steps), then follows the link to draw its graph
    first = client.get(f"/ui/runs/{failing}").text
    drawn = client.get(f"/ui/runs/{failing}", params={"graph": "all"}).text
    # Then the first page links to the drawing instead of drawing it, and the second draws it
    assert '<svg xmlns="http://www.w3.org/2000/svg" id="graph"' not in first
    assert 'Its 2 steps make a large drawing: <a href="?graph=all#graph" id="draw">' in first
    assert '<svg xmlns="http://www.w3.org/2000/svg" id="graph"' in drawn


def test_the_timeline_draws_each_attempt_and_the_time_between_two_of_one_step(client, rt, failing, clock):
    # Given the failed run redriven 30 s later, so its step `file` has two attempts (failed, then passed)
    sign_in(client, token(rt, "user:ops"))
    clock.advance(30)
    rt.dlq_redrive(failing, actor="user:ops", tenant="acme")
    assert rt.drive(failing).state == "completed"
    # When its page is read
    page = client.get(f"/ui/runs/{failing}").text
    # Then the timeline has a bar per attempt, each coloured by its state and titled with what it was
    drawn = page[page.index('<svg xmlns="http://www.w3.org/2000/svg" id="timeline"'):]
    drawn = drawn[:drawn.index("</svg>")]
    bars = re.findall(r'class="bar state-(\w+)"><title>([^<]+)</title>', drawn)
    assert [s for s, t in bars if t.startswith("file ")] == ["failed", "succeeded"]
    assert any(t.startswith("classify attempt 1") for _, t in bars)
    assert "KeyError" in next(t for s, t in bars if s == "failed")
    # and the time between the two attempts of `file` is drawn, saying how long
    assert re.search(r'class="gap"><title>file: 30.0 s between attempts</title>', drawn)
    assert 'role="img"' in drawn and "aria-label=" in drawn
