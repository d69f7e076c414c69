"""The operators' pages: dead letters with redrive, circuit breakers with reset, schedules with their next fire
time, the definitions registry with the security diff between two versions; what every tenant shares only for
the access policy's operators."""

from __future__ import annotations

import re

import pytest
from interp_helpers import S, make_plan
from test_ui_pages import csrf_of, sign_in, token

from sealflow.core.breakers import BreakerSettings
from sealflow.dsl.plan import TriggerPlan
from sealflow.execution.actions import action


@pytest.fixture
def dead(rt, registry):
    """A run of alice's that failed (a dead letter); its action succeeds when run again."""
    tries = []

    @action("t.flaky", registry=registry)
    def flaky(ctx):
        tries.append(1)
        if len(tries) == 1:
            raise RuntimeError("the ledger was locked")
        return {"ok": True}

    run_id = rt.submit(make_plan(S("post", "action", action="t.flaky"), name="post-flow"), {},
                       initiator="user:alice", tenant="acme")
    assert rt.drive(run_id).state == "failed"
    return run_id


def test_dead_letters_are_listed_and_redriven_by_those_who_may(client, rt, dead):
    # Given the auditor (dlq:read) and the operator of acme's runs (dlq:*)
    sign_in(client, token(rt, "user:ida"))
    read_only = client.get("/ui/dlq").text
    sign_in(client, token(rt, "user:ops"))
    page = client.get("/ui/dlq").text
    # Then both see the dead letter, only the operator a redrive form
    assert f'id="letter-{dead}"' in read_only and 'class="redrive"' not in read_only
    assert f'id="letter-{dead}"' in page and 'class="redrive"' in page
    # When the operator redrives it from the list, with the confirmation
    done = client.post(f"/ui/runs/{dead}/redrive", data={"csrf_token": csrf_of(page), "confirm": "yes"},
                       follow_redirects=False)
    # Then the run goes on and completes
    assert done.status_code == 303 and rt.drive(dead).state == "completed"


def test_breakers_show_their_state_and_an_operator_resets_one(client, rt, operator):
    # Given breaker crm.api opened by three failures
    settings = BreakerSettings(failures=3)
    for _ in range(3):
        rt.store.breaker_record("crm.api", rt.clock.now(), settings, error_class="network", probe=False,
                                message="connection refused")
    # When a tenant's member asks for the page, then the operator
    sign_in(client, token(rt, "user:ops"))
    refused = client.get("/ui/breakers")
    sign_in(client, token(rt, operator))
    page = client.get("/ui/breakers").text
    # Then the member is refused, and the operator sees it open with its last error
    assert refused.status_code == 403 and "Only an operator" in refused.text
    row = re.search(r'<tr id="breaker-crm.api">.*?</tr>', page, re.S).group(0)
    assert ">open</span>" in row and "connection refused" in row
    # When the operator resets it with the confirmation
    done = client.post("/ui/breakers/crm.api/reset", data={"csrf_token": csrf_of(page), "confirm": "yes"},
                       follow_redirects=False)
    # Then it is closed, and the reset is audited as the operator's
    assert done.status_code == 303 and [b.state for b in rt.store.breakers()] == ["closed"]
    assert any(a.event == "circuit_reset" and a.actor == operator for a in rt.store.audit(None))


def test_schedules_show_the_next_fire_time(client, rt, clock, operator):
    # Given a stored workflow that runs at 09:00 in Paris every day
    plan = make_plan(S("a", "set", assign={"x": "1"}), name="nightly", trigger=TriggerPlan(
        schedule={"cron": "0 9 * * *", "timezone": "Europe/Paris", "run_as": "service:nightly"}))
    rt.store.put_plan(plan.digest, plan.name, plan.version, plan.to_json(indent=None), clock.now())
    # When the operator opens the schedules page
    sign_in(client, token(rt, operator))
    page = client.get("/ui/schedules").text
    # Then it shows the schedule and its next fire time (09:00 Paris is 07:00 or 08:00 UTC)
    assert "nightly v1" in page and "<code>0 9 * * *</code>" in page and "Europe/Paris" in page
    assert re.search(r'<td class="next">\d{4}-\d\d-\d\d 0[78]:00:00 UTC</td>', page)


def test_the_definitions_page_shows_the_security_diff_of_two_versions(client, rt, clock, operator, known):
    # Given two versions of approve-flow: the second drops the approval gate before the action
    second = make_plan(S("act", "action", action="t.note", args={"text": "no approval"}), name="approve-flow",
                       version=2)
    rt.store.put_plan(second.digest, second.name, second.version, second.to_json(indent=None), clock.now())
    sign_in(client, token(rt, operator))
    # When the operator compares them
    page = client.get("/ui/definitions", params={"old": known.digest, "new": second.digest}).text
    # Then both are listed (unsigned in development mode), and the diff says what a reviewer must see
    assert page.count(">unsigned<") == 2
    assert "Security diff: approve-flow v1 to v2" in page
    assert re.search(r"<td>D6\d\d</td><td><span class=\"badge state-waiting\">review</span>", page)
    # And a digest the store does not hold is said so
    bad = client.get("/ui/definitions", params={"old": known.digest, "new": "sha256:" + "0" * 64}).text
    assert "the store holds no plan with that digest" in bad
