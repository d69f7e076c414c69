"""``/v1/notifications``: a tenant's approval notification deliveries, and retrying one that failed for good.
Under the acme/globex access policy with ``user:root`` as its operator. Given / When / Then in each test."""

from __future__ import annotations

import pytest
from security_helpers import ACME, PolicyFile, events, secured_runtime

from sealflow.runtime.config import RuntimeConfig
from sealflow.server.problems import TYPE_PREFIX


class OperatedPolicy(PolicyFile):
    """The acme/globex policy with ``user:root`` as its operator."""

    def save(self) -> None:
        import yaml

        self.path.write_text(yaml.safe_dump({"tenants": self.tenants, "operators": ["user:root"]}, sort_keys=False))


@pytest.fixture
def policy(tmp_path):
    return OperatedPolicy(tmp_path / "access.yaml", ACME)


@pytest.fixture
def rt(tmp_path, registry, clock, policy):
    """A runtime under ``policy`` whose approval notifications go to one channel, ``ops``, tried once."""
    config = RuntimeConfig.from_dict({"notifications": {"max_attempts": 1, "channels": {
        "ops": {"kind": "webhook", "url": "http://127.0.0.1:9/hook", "secret": {"secret": "HOOK_SECRET"}}}}})
    runtime = secured_runtime(tmp_path, registry, clock, policy, config=config)
    yield runtime
    runtime.close()
    runtime.store.close()


@pytest.fixture
def failed_delivery(client, mint, rt):
    """A run of acme waiting at its gate, whose one notification (channel ``ops``) failed for good."""
    made = client.post("/v1/runs", json={"workflow": "approve-flow", "version": 1, "input": {"amount": 5}},
                       headers=mint("user:alice"))
    assert made.status_code == 201, made.text
    run_id = made.json()["run_id"]
    assert rt.drive(run_id).state == "waiting"
    (taken,) = rt.store.take_deliveries()
    assert rt.store.settle_delivery(taken, state="failed", error="HTTP 500")
    return run_id, taken.id


def problem(response, kind: str, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.json()["type"] == TYPE_PREFIX + kind
    return response.json()


def test_a_member_who_reads_runs_lists_the_deliveries_and_nobody_else_sees_them(client, mint, failed_delivery):
    run_id, delivery_id = failed_delivery
    # When the run's initiator, an auditor of acme, and a member of another tenant list the failed deliveries
    mine = client.get("/v1/notifications?failed=true", headers=mint("user:alice"))
    audited = client.get(f"/v1/notifications?run={run_id}", headers=mint("user:ida"))
    other = client.get("/v1/notifications?failed=true", headers=mint("user:eve", "globex"))
    # Then acme's readers see it, with why it failed and no payload; globex's member sees nothing
    assert mine.status_code == 200, mine.text
    (shown,) = mine.json()
    assert shown["id"] == delivery_id and shown["state"] == "failed" and shown["last_error"] == "HTTP 500"
    assert shown["run_id"] == run_id and "payload" not in shown and "url" not in shown
    assert [d["id"] for d in audited.json()] == [delivery_id]
    assert other.status_code == 200 and other.json() == []


def test_only_an_operator_retries_a_failed_delivery_and_it_is_audited(client, mint, rt, failed_delivery):
    run_id, delivery_id = failed_delivery
    # When acme's members (its initiator, its ops role) try to retry it / Then it is forbidden, nothing changed
    for who in ("user:alice", "user:ops"):
        problem(client.post(f"/v1/notifications/{delivery_id}/retry", headers=mint(who)), "forbidden", 403)
    assert [d.state for d in rt.store.deliveries(run_id=run_id)] == ["failed"]
    # When the operator retries it
    done = client.post(f"/v1/notifications/{delivery_id}/retry", headers=mint("user:root"))
    # Then it is pending again, due at once, its attempts counted afresh, and audited on the run
    assert done.status_code == 200, done.text
    assert done.json() == {"id": delivery_id, "state": "pending", "channel": "ops", "run_id": run_id,
                           "step_id": "ask", "previous_attempts": 1}
    (now,) = rt.store.deliveries(run_id=run_id)
    assert now.state == "pending" and now.attempts == 0
    (retried,) = events(rt, "notification_retried", run_id)
    assert retried.actor == "user:root"
    # And retrying it again (it is not failed now) is a 409, an unknown id a 404, a malformed one a 422
    problem(client.post(f"/v1/notifications/{delivery_id}/retry", headers=mint("user:root")),
            "invalid-operation", 409)
    problem(client.post("/v1/notifications/ntf_0123456789abcdef/retry", headers=mint("user:root")), "not-found", 404)
    assert client.post("/v1/notifications/..%2fruns/retry", headers=mint("user:root")).status_code in (404, 422)
