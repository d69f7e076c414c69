"""API tokens and run listings in the store, on every backend (the ``store`` fixture of the store suite)."""

from __future__ import annotations

import json

import pytest

from sealflow.store import InvalidOperation, NewRun
from sealflow.store.records import ApiTokenRecord, RunQuery

T0 = 1_700_000_000.0


def _run(store, run_id, *, tenant="acme", workflow="wf", initiator="user:ana", now=T0, version=1):
    store.submit(NewRun(id=run_id, tenant=tenant, workflow=workflow, workflow_version=version,
                        plan_digest=f"sha256:{workflow}", plan_json='{"plan": true}', input_json="{}",
                        input_hash="{}", initiator=initiator, idempotency_key=None, deadline=None,
                        first_step="a", first_lease_ms=30_000), now)


def test_a_token_is_stored_with_its_hash_only_and_revocation_is_audited(store):
    # Given a token record
    token = ApiTokenRecord("tok1", "user:ana", "acme", T0, "user:root", T0 + 60, None, "ci", "sha256:abc")
    # When it is created, read back and revoked twice
    store.create_api_token(token, T0)
    got = store.api_token("tok1")
    first = store.revoke_api_token("tok1", T0 + 1, actor="user:root")
    second = store.revoke_api_token("tok1", T0 + 2, actor="user:root")
    # Then it reads back as created, is revoked at the first revocation, and both events are audited once
    assert got == token and got.usable(T0) and not got.usable(T0 + 60)
    assert first.revoked_at == T0 + 1 and second.revoked_at == T0 + 1 and not first.usable(T0 + 1)
    events = [a.event for a in store.audit()]
    assert events.count("api_token.created") == 1 and events.count("api_token.revoked") == 1
    assert [t.id for t in store.api_tokens("acme")] == ["tok1"] and store.api_tokens("other") == []
    assert store.api_token("nope") is None


def test_revoking_an_unknown_token_says_so(store):
    with pytest.raises(InvalidOperation, match="no API token 'nope'"):
        store.revoke_api_token("nope", T0, actor="user:root")


def test_runs_are_listed_newest_first_by_tenant_and_filters_and_pages_never_repeat(store):
    # Given five runs of acme (two workflows, two initiators) and one of another tenant
    for i in range(5):
        _run(store, f"r{i}", workflow="wf" if i % 2 else "other", initiator="user:ana" if i < 3 else "user:bo",
             now=T0 + i)
    _run(store, "x1", tenant="globex", now=T0 + 10)
    # When pages of two are read with the keyset of the previous page's last run
    pages, after = [], None
    while True:
        page = store.query_runs(RunQuery(tenant="acme", after=after, limit=2))
        if not page:
            break
        pages.append([r.id for r in page])
        after = (page[-1].created_at, page[-1].id)
    # Then every acme run comes once, newest first, and none of globex
    assert pages == [["r4", "r3"], ["r2", "r1"], ["r0"]]
    # And the filters narrow it
    assert [r.id for r in store.query_runs(RunQuery(tenant="acme", workflow="wf"))] == ["r3", "r1"]
    assert [r.id for r in store.query_runs(RunQuery(tenant="acme", initiator="user:bo"))] == ["r4", "r3"]
    assert [r.id for r in store.query_runs(RunQuery(tenant="acme", states=("queued",), created_after=T0 + 1,
                                                    created_before=T0 + 3))] == ["r2", "r1"]
    assert store.query_runs(RunQuery(tenant="acme", states=("completed",))) == []


def test_runs_are_filtered_by_version_and_counted_by_state_whatever_the_states_asked(store):
    # Given three runs of wf (versions 1, 2, 2) in acme, one cancelled, and one of another tenant
    for i, version in enumerate((1, 2, 2)):
        _run(store, f"r{i}", version=version, now=T0 + i)
    _run(store, "x1", tenant="globex", version=2)
    store.cancel("r2", T0 + 5, actor="user:ana")
    # When runs of version 2 are listed, and counted by state, once with a state filter
    listed = store.query_runs(RunQuery(tenant="acme", version=2))
    counts = store.count_runs(RunQuery(tenant="acme", version=2, states=("queued",), after=(T0 + 9, "r9"), limit=1))
    # Then the list has only version 2, and the counts cover every state of version 2 in acme
    assert [r.id for r in listed] == ["r2", "r1"]
    assert sum(counts.values()) == 2 and counts.get("queued") == 1 and set(counts) - {"queued"} <= {
        "cancelled", "cancelling"}
    assert store.count_runs(RunQuery(tenant="nobody")) == {}


def test_plan_digests_name_the_plans_stored_for_a_workflow(store):
    # Given two runs of one workflow on two plans
    _run(store, "r1", workflow="wf")
    store.put_plan("sha256:v2", "wf", 2, json.dumps({"plan": 2}), T0 + 5)
    # Then the plans are found by name, and by name and version
    assert [d for d, _, _ in store.plan_digests("wf")] == ["sha256:v2", "sha256:wf"]
    assert store.plan_digests("wf", 2) == [("sha256:v2", 2, T0 + 5)] and store.plan_digests("nope") == []
    assert store.stored_plans() == [("wf", 1, "sha256:wf", T0), ("wf", 2, "sha256:v2", T0 + 5)]
