"""What the HTTP API refuses is counted (issue 31): another tenant's run, approval or dead letter (answered as an
unknown one) in ``sealflow_cross_tenant_attempts_total{via="api"}``; a missing permission (a 403, or a member's
missing permission answered as an unknown run) and every failed authentication in
``sealflow_policy_denials_total{via="api"}``; an unknown run id in neither.

Given / When / Then in each test.
"""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families
from test_server_api import problem_of, submit


def counts(rt) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, for the two families under test."""
    text = rt.telemetry.metrics.exposition().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name in ("sealflow_cross_tenant_attempts_total", "sealflow_policy_denials_total")}


def cross_tenant(rt, via: str = "api") -> float:
    return counts(rt).get(("sealflow_cross_tenant_attempts_total", (("via", via),)), 0.0)


def denials(rt, error_class: str, via: str = "api") -> float:
    return counts(rt).get(("sealflow_policy_denials_total", (("error_class", error_class), ("via", via))), 0.0)


def waiting_run(client, mint, rt) -> tuple[str, dict]:
    """A run of acme started by alice, waiting at its approval gate: its id and its gate."""
    run_id = submit(client, mint("user:alice", "acme")).json()["run_id"]
    rt.drive(run_id)
    return run_id, rt.status(run_id).waiting


def test_asking_for_another_tenant_s_run_approval_or_dead_letter_counts_as_a_cross_tenant_attempt(client, mint, rt):
    # Given a waiting run of acme, and eve of globex with a token for her tenant and one naming acme
    run_id, gate = waiting_run(client, mint, rt)
    for eve in (mint("user:eve", "globex"), mint("user:eve", "acme")):
        # When eve reads, cancels, audits, approves and redrives it
        answers = [client.get(f"/v1/runs/{run_id}", headers=eve),
                   client.post(f"/v1/runs/{run_id}/cancel", headers=eve),
                   client.get(f"/v1/runs/{run_id}/audit", headers=eve),
                   client.post(f"/v1/approvals/{run_id}/{gate['step']}", headers=eve,
                               json={"decision": "approve", "payload_hash": gate["show_hash"]}),
                   client.post(f"/v1/dlq/{run_id}/redrive", headers=eve)]
        # Then each is the unknown-run 404
        for answer in answers:
            problem_of(answer, "not-found", 404)
    # And each was counted as a cross-tenant attempt of the API, none as a step message's
    assert cross_tenant(rt) == 10 and cross_tenant(rt, "message") == 0


def test_an_unknown_run_id_is_a_404_that_counts_as_nothing(client, mint, rt):
    # Given alice of acme / When she asks for a run that does not exist
    problem_of(client.get("/v1/runs/run_0000000000000_0000000000000000", headers=mint()), "not-found", 404)
    # Then nothing is counted: a typo is not an attack
    assert cross_tenant(rt) == 0 and denials(rt, "unauthorized") == 0


def test_a_missing_permission_counts_as_a_policy_denial(client, mint, rt):
    # Given a waiting run of acme started by alice
    run_id, _ = waiting_run(client, mint, rt)
    # When mallory (no role in acme: not a member) submits, and bob (a manager of acme without runs:read) reads
    # alice's run
    problem_of(submit(client, mint("user:mallory", "acme")), "forbidden", 403)
    problem_of(client.get(f"/v1/runs/{run_id}", headers=mint("user:bob", "acme")), "not-found", 404)
    # And alice, who may not retry notifications (operators only), tries
    problem_of(client.post("/v1/notifications/ntf_0123/retry", headers=mint()), "forbidden", 403)
    # Then the two 403s and bob's hidden refusal are policy denials; none is a cross-tenant attempt
    assert denials(rt, "unauthorized") == 3 and cross_tenant(rt) == 0


def test_every_failed_authentication_counts_even_past_the_client_s_burst(client, rt):
    # Given a client sending 15 unknown tokens (the first 10 answered 401 and audited, the rest 429)
    codes = [client.get("/v1/runs", headers={"Authorization": "Bearer sf_nope"}).status_code for _ in range(15)]
    assert codes.count(401) == 10 and codes.count(429) == 5
    # When a request comes with no credential at all (from the same client: refused as rate-limited too)
    client.get("/v1/runs")
    # Then all 16 count as failed authentications, though only 10 were audited
    assert denials(rt, "unauthenticated") == 16
    assert sum(e.event == "auth_failed" for e in rt.store.audit(None)) == 10


def test_a_failed_ui_sign_in_and_a_ui_page_of_another_tenant_s_run_are_counted_too(client, mint, rt):
    # Given a run of acme
    run_id, _ = waiting_run(client, mint, rt)
    # When a garbled token is posted to the sign-in page
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/ui/signin").text).group(1)
    assert client.post("/ui/signin", data={"csrf_token": csrf, "token": "sf_nope"}).status_code == 401
    # And eve of globex signs in and opens acme's run page
    token = mint("user:eve", "globex")["Authorization"].removeprefix("Bearer ")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/ui/signin").text).group(1)
    assert client.post("/ui/signin", data={"csrf_token": csrf, "token": token}).status_code in (200, 303)
    assert client.get(f"/ui/runs/{run_id}").status_code == 404
    # Then the failed sign-in is a failed authentication, and the page a cross-tenant attempt
    assert denials(rt, "unauthenticated") == 1 and cross_tenant(rt) == 1
