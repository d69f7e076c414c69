"""The runs list page: filters (state, workflow, version, initiator, time range), search by run id, cursor
pages whose links keep the filters, and the count of each state."""

from __future__ import annotations

import re

import pytest
from interp_helpers import S, make_plan
from test_ui_pages import sign_in, token

from sealflow.execution.actions import action
from sealflow.server.ui import runlist


@pytest.fixture
def runs(rt, registry, clock):
    """acme's runs: five of ``ok-flow`` v1 (three by alice, two by dan) that complete, two of ``bad-flow`` v2 by
    alice that fail, one of ``ok-flow`` v2: {name: [run ids, oldest first]}."""
    action("t.ok", registry=registry)(lambda ctx: {"ok": True})

    @action("t.bad", registry=registry)
    def bad(ctx):
        raise RuntimeError("no")

    ok1 = make_plan(S("a", "action", action="t.ok"), name="ok-flow", version=1)
    ok2 = make_plan(S("a", "action", action="t.ok"), name="ok-flow", version=2)
    bad2 = make_plan(S("a", "action", action="t.bad"), name="bad-flow", version=2)
    made: dict[str, list[str]] = {"ok1": [], "bad2": [], "ok2": []}
    for name, plan, who in [("ok1", ok1, "user:alice")] * 3 + [("ok1", ok1, "user:dan")] * 2 + \
            [("bad2", bad2, "user:alice")] * 2 + [("ok2", ok2, "user:alice")]:
        clock.advance(10)
        run_id = rt.submit(plan, {}, initiator=who, tenant="acme")
        rt.drive(run_id)
        made[name].append(run_id)
    return made


def listed(html: str) -> list[str]:
    return re.findall(r'<td><a href="/ui/runs/(run_[^"]+)">', html)


def test_a_filter_by_state_finds_the_failed_runs_with_every_states_count(client, rt, runs):
    # Given an auditor signed in
    sign_in(client, token(rt, "user:ida"))
    # When she filters by state failed
    page = client.get("/ui/runs", params={"state": "failed"}).text
    # Then only the failed runs are listed, newest first, and the counts cover every state
    assert listed(page) == runs["bad2"][::-1]
    assert ">failed: 2</a>" in page and ">completed: 6</a>" in page and "8 runs by state" in page
    assert 'value="failed" id="state-failed" checked' in page


def test_workflow_version_initiator_and_time_range_narrow_the_list(client, rt, runs, clock):
    sign_in(client, token(rt, "user:ida"))
    # When the list is filtered by workflow and version, by initiator, and by a time range
    by_version = client.get("/ui/runs", params={"workflow": "ok-flow", "version": "2"}).text
    by_initiator = client.get("/ui/runs", params={"initiator": "user:dan"}).text
    last_time = rt.status(runs["ok2"][0]).run.created_at
    from datetime import UTC, datetime

    stamp = datetime.fromtimestamp(last_time, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    by_time = client.get("/ui/runs", params={"after": stamp}).text
    # Then each lists what it asks for, and no more
    assert listed(by_version) == runs["ok2"]
    assert listed(by_initiator) == runs["ok1"][3:][::-1]
    assert listed(by_time) == runs["ok2"]


def test_pages_follow_by_cursor_and_their_links_keep_the_filters(client, rt, runs, monkeypatch):
    # Given pages of two runs, and the completed runs of ok-flow asked for
    monkeypatch.setattr(runlist, "PAGE", 2)
    sign_in(client, token(rt, "user:ida"))
    url = "/ui/runs?state=completed&workflow=ok-flow"
    seen: list[str] = []
    # When every next-page link is followed
    for _ in range(10):
        page = client.get(url).text
        seen += listed(page)
        found = re.search(r'<a href="([^"]+)" id="next"', page)
        if found is None:
            break
        url = found.group(1).replace("&amp;", "&")
        assert "state=completed" in url and "workflow=ok-flow" in url and "cursor=" in url
    # Then each completed ok-flow run came once, newest first
    assert seen == (runs["ok1"] + runs["ok2"])[::-1]


def test_a_run_id_opens_its_page_and_a_bad_filter_says_what_is_wrong(client, rt, runs):
    sign_in(client, token(rt, "user:ida"))
    # When a run id is sought, then a version that is not a number and a state that is none
    found = client.get("/ui/runs", params={"run": runs["bad2"][0]}, follow_redirects=False)
    bad_version = client.get("/ui/runs", params={"version": "two"})
    bad_state = client.get("/ui/runs", params={"state": "exploded"})
    bad_cursor = client.get("/ui/runs", params={"cursor": "nonsense"})
    # Then the run's page opens, and each bad filter is refused in the page's words
    assert found.status_code == 303 and found.headers["location"] == f"/ui/runs/{runs['bad2'][0]}"
    assert bad_version.status_code == 422 and "version: &#39;two&#39; is not a version number" in bad_version.text
    assert bad_state.status_code == 422 and "is not a run state" in bad_state.text
    assert bad_cursor.status_code == 422 and "first page" in bad_cursor.text and "next_cursor" not in bad_cursor.text


def test_a_principal_of_another_tenant_sees_no_run_and_no_count(client, rt, runs):
    # Given eve of globex signed in
    sign_in(client, token(rt, "user:eve", tenant="globex"))
    # When she lists the runs
    page = client.get("/ui/runs").text
    # Then none of acme's is listed or counted
    assert listed(page) == [] and 'id="counts"' not in page and 'id="no-runs"' in page


def test_the_api_filters_by_version_too(client, rt, runs, mint):
    # When the API lists ok-flow's runs of version 2
    got = client.get("/v1/runs", params={"workflow": "ok-flow", "version": 2}, headers=mint("user:ida"))
    # Then only that version's run is listed
    assert got.status_code == 200 and [r["run_id"] for r in got.json()["runs"]] == runs["ok2"]


def test_a_tag_finds_the_runs_submitted_with_it_here_and_in_the_api(client, rt, registry, runs):
    # Given two runs of acme submitted with a customer's tag, and one without
    action("t.tagged", registry=registry)(lambda ctx: {"ok": True})
    plan = make_plan(S("a", "action", action="t.tagged"), name="tag-flow")
    tagged = [rt.submit(plan, {}, initiator="user:alice", tenant="acme", tags={"customer": "c-42"}) for _ in range(2)]
    rt.submit(plan, {}, initiator="user:alice", tenant="acme")
    sign_in(client, token(rt, "user:ida"))
    # When the list is filtered by that tag
    page = client.get("/ui/runs", params={"tag": "customer=c-42"}).text
    # Then only those two are listed, and the form shows the filter back
    assert sorted(listed(page)) == sorted(tagged) and 'name="tag" value="customer=c-42"' in page
    # and a run's page shows its tags, each a link to the runs carrying it
    assert 'href="/ui/runs?tag=customer%3Dc-42"' in client.get(f"/ui/runs/{tagged[0]}").text
    # and a tag that is not name=value is refused in the page's words
    bad = client.get("/ui/runs", params={"tag": "customer"})
    assert bad.status_code == 422 and "tag:" in bad.text and "NAME=VALUE" in bad.text
