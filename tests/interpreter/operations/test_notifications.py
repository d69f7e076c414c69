"""Approval notifications end to end: a gate opens -> delivery rows in its commit -> posts to a real local
receiver (threaded ``http.server``), signed per Standard Webhooks, retried with backoff, dead-lettered. The
receivers listen on 127.0.0.1, which a channel reaches only because each runtime here allow-lists it
(``notifications.allow_networks``); without that, a loopback or any other non-public address is refused
before any connection.

Given / When / Then in each test.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import threading
import time

import pytest
from interp_helpers import S, approval, gate, make_plan
from prometheus_client.parser import text_string_to_metric_families
from webhook_receivers import Receiver, guard_connections, standard_webhooks_signature

from sealflow.execution.actions import action
from sealflow.operations.notifications import Deliverer
from sealflow.runtime.config import RuntimeConfig
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store

SECRET = "whsec_" + base64.b64encode(b"notification-signing-key-0123456").decode()
PUBLIC = "https://sealflow.example.com"


@pytest.fixture
def receiver():
    with Receiver() as r:
        yield r


@pytest.fixture
def connects(monkeypatch):
    """Every connection attempted, as (host, port); one outside 127.0.0.0/8 raises instead of connecting."""
    return guard_connections(monkeypatch)


@pytest.fixture
def make_runtime(tmp_path, registry, clock):
    """A runtime whose configuration has the given notification channels (secrets in files)."""
    made = []
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "HOOK_SECRET").write_text(SECRET + "\n")

    @action("t.note", registry=registry, effect="write")
    def note(ctx, text="", value=0):
        return {"text": text, "value": value}

    def build(channels: dict, **section) -> Runtime:
        # the receivers are on 127.0.0.1: allow-listed explicitly, unless a test says otherwise
        section = {"allow_networks": ["127.0.0.1/32"], **section}
        config = RuntimeConfig.from_dict({"secrets": {"dir": str(secrets)}, "notifications": {
            "public_url": PUBLIC + "/", "backoff": {"first": 1, "max": 4}, "timeout": 2, "channels": channels,
            **section}})
        rt = Runtime(open_store(f"sqlite:///{tmp_path}/rt.db", clock=clock), registry, {}, rng=random.Random(7),
                     worker_timeout_ms=20, config=config)
        made.append(rt)
        return rt

    build.secrets = secrets  # type: ignore[attr-defined]
    yield build
    for rt in made:
        rt.close()
        rt.store.close()


def approval_plan(name="payments"):
    return make_plan(S("ask", "approval", approval=approval(show="input", quorum=2)),
                     S("act", "action", action="t.note", args={"text": "approved"}), name=name)


def gated_plan():
    return make_plan(S("record", "action", action="t.note", args={"value": "${{ input.value }}"},
                       requires_approval_if="output.value > 100", gate=gate(approvers=("role:finance",))),
                     S("email", "action", action="t.note", args={"text": "email"}))


def deliverer(rt: Runtime) -> Deliverer:
    return Deliverer.of(rt)


def test_an_opening_gate_writes_one_signed_delivery_per_channel(make_runtime, receiver):
    # Given a webhook channel
    url = receiver.script("/hook", [200])
    rt = make_runtime({"ops": {"kind": "webhook", "url": url, "secret": {"secret": "HOOK_SECRET"}}})
    # When a run reaches an approval step
    status = rt.run(approval_plan(), {"amount": 10}, initiator="user:ana")
    assert status.state == "waiting"
    # Then its commit wrote one pending delivery, saying who must decide, what, until when, and where
    (row,) = rt.store.deliveries(run_id=status.run.id)
    assert (row.state, row.channel, row.kind, row.step_id, row.attempts) == ("pending", "ops", "webhook", "ask", 0)
    data = row.payload["data"]
    assert row.payload["type"] == "approval.requested"
    assert data["approvers"] == ["role:manager"] and data["quorum"] == 2
    assert data["workflow"] == "payments" and data["run_id"] == status.run.id and data["tenant"] == "default"
    assert data["show_hash"] == status.waiting["show_hash"] and data["expires_at"].endswith("Z")
    assert data["url"] == f"{PUBLIC}/ui/approvals#gate-{status.run.id}-ask"
    assert "amount" not in json.dumps(row.payload)  # the hash of what is approved, never the payload itself
    # When the deliverer runs
    report = deliverer(rt).deliver_once()
    # Then the receiver got it, signed per Standard Webhooks with the channel's secret
    assert (report.delivered, report.retried, report.failed) == (1, 0, 0)
    ((path, headers, body),) = receiver.hits("/hook")
    assert headers["webhook-id"] == row.id
    assert headers["webhook-signature"] == standard_webhooks_signature(SECRET, row.id, headers["webhook-timestamp"],
                                                                       body)
    assert json.loads(body) == row.payload
    (done,) = rt.store.deliveries(run_id=status.run.id)
    assert done.state == "delivered" and done.attempts == 1
    events = [a.event for a in rt.store.audit(status.run.id)]
    assert "notification_delivered" in events
    # And an approval short of the quorum opens nothing new
    rt.approve(status.run.id, actor="user:ben")
    assert len(rt.store.deliveries(run_id=status.run.id)) == 1


def test_a_requires_approval_if_gate_notifies_its_approvers_and_filters_choose_channels(make_runtime, receiver):
    # Given two channels: one for every workflow, one only for another workflow
    rt = make_runtime({
        "all": {"kind": "webhook", "url": receiver.url + "/all", "secret": {"secret": "HOOK_SECRET"}},
        "other": {"kind": "webhook", "url": receiver.url + "/other", "secret": {"secret": "HOOK_SECRET"},
                  "workflows": ["refunds"]},
        "acme-only": {"kind": "webhook", "url": receiver.url + "/acme", "secret": {"secret": "HOOK_SECRET"},
                      "tenants": ["acme"]}})
    # When a step's output opens its requires_approval_if gate
    status = rt.run(gated_plan(), {"value": 500}, initiator="user:ana")
    # Then only the unfiltered channel has a delivery, naming the gate and its approvers
    (row,) = rt.store.deliveries(run_id=status.run.id)
    assert row.channel == "all" and row.step_id == "record@gate"
    assert row.payload["data"]["approvers"] == ["role:finance"]
    # And a run that needs no approval writes none
    quiet = rt.run(gated_plan(), {"value": 5}, initiator="user:ana")
    assert quiet.state == "completed" and rt.store.deliveries(run_id=quiet.run.id) == []


def test_a_receiver_that_fails_twice_gets_it_on_the_third_try_after_backoff(make_runtime, receiver, clock):
    # Given a receiver answering 500, 503, then 200
    url = receiver.script("/flaky", [500, 503, 200])
    rt = make_runtime({"ops": {"kind": "webhook", "url": url, "secret": {"secret": "HOOK_SECRET"}}})
    run_id = rt.run(approval_plan(), {}, initiator="user:ana").run.id
    d = deliverer(rt)
    # When the first try fails
    assert d.deliver_once().retried == 1
    (row,) = rt.store.deliveries(run_id=run_id)
    # Then it waits out a backoff (first: 1 s, jittered 0.5-1.0) and keeps no response body
    assert row.state == "pending" and row.last_error == "HTTP 500" and row.attempts == 1
    assert clock.now() + 0.5 <= row.next_at <= clock.now() + 1.0
    assert d.deliver_once().retried == 0  # not due yet: nothing posted
    assert len(receiver.hits("/flaky")) == 1
    # When time passes: the second try fails, the third (after a longer backoff) succeeds
    clock.advance(1.0)
    assert d.deliver_once().retried == 1
    (row,) = rt.store.deliveries(run_id=run_id)
    assert row.last_error == "HTTP 503" and clock.now() + 1.0 <= row.next_at <= clock.now() + 2.0
    clock.advance(2.0)
    assert d.deliver_once().delivered == 1
    # Then it was delivered once, at its third attempt, with the same webhook-id every time
    (row,) = rt.store.deliveries(run_id=run_id)
    assert (row.state, row.attempts) == ("delivered", 3)
    assert {h["webhook-id"] for _, h, _ in receiver.hits("/flaky")} == {row.id}


def test_a_receiver_that_always_fails_dead_letters_the_delivery_and_the_run_goes_on(make_runtime, receiver, clock,
                                                                                    caplog):
    # Given a receiver that always fails and three attempts allowed
    url = receiver.script("/down", [500])
    rt = make_runtime({"ops": {"kind": "webhook", "url": url, "secret": {"secret": "HOOK_SECRET"}}}, max_attempts=3)
    run_id = rt.run(approval_plan(), {}, initiator="user:ana").run.id
    d = deliverer(rt)
    # When every attempt fails
    with caplog.at_level(logging.WARNING, logger="sealflow.notifications"):
        for _ in range(3):
            d.deliver_once()
            clock.advance(10)
    # Then the delivery is dead-lettered, listed as failed and audited; no more tries are made
    (row,) = rt.store.deliveries(state="failed")
    assert row.run_id == run_id and row.attempts == 3 and row.last_error == "HTTP 500"
    failed = [a for a in rt.store.audit(run_id) if a.event == "notification_failed"]
    assert len(failed) == 1 and failed[0].detail["attempts"] == 3 and failed[0].detail["channel"] == "ops"
    clock.advance(1000)
    assert not d.deliver_once() and len(receiver.hits("/down")) == 3
    assert SECRET not in caplog.text
    # And the run is unaffected: still waiting; approving it completes it
    assert rt.status(run_id).state == "waiting"
    rt.approve(run_id, actor="user:ben")
    rt.approve(run_id, actor="user:cy")
    assert rt.drive(run_id).state == "completed"


def test_a_redirect_is_not_followed_and_a_slow_receiver_times_out(make_runtime, receiver):
    # Given a receiver that redirects, and one slower than the timeout
    slow = Receiver(slow=1.5)
    with slow:
        rt = make_runtime({
            "moved": {"kind": "webhook", "url": receiver.script("/moved", [302]), "secret": {"secret": "HOOK_SECRET"}},
            "slow": {"kind": "webhook", "url": slow.url + "/slow", "secret": {"secret": "HOOK_SECRET"}}},
            timeout=0.5)
        run_id = rt.run(approval_plan(), {}, initiator="user:ana").run.id
        # When delivered
        assert deliverer(rt).deliver_once().retried == 2
    # Then the redirect's target was never called, and each failure says why without a URL
    errors = {r.channel: r.last_error for r in rt.store.deliveries(run_id=run_id)}
    assert errors == {"moved": "HTTP 302 (a redirect: not followed)", "slow": "timed out after 0.5 s"}
    assert receiver.hits("/elsewhere") == []


def test_a_channel_to_a_loopback_receiver_is_refused_before_any_connection_unless_allow_listed(make_runtime,
                                                                                                receiver, connects):
    # Given a webhook channel to a receiver on 127.0.0.1, and a configuration that allow-lists nothing
    channels = {"ops": {"kind": "webhook", "url": receiver.script("/hook", [200]), "secret": {"secret": "HOOK_SECRET"}}}
    rt = make_runtime(channels, allow_networks=[])
    run_id = rt.run(approval_plan(), {}, initiator="user:ana").run.id
    # When delivered
    assert deliverer(rt).deliver_once().retried == 1
    # Then the attempt failed before any connection, saying why and how to allow it, without the URL
    (row,) = rt.store.deliveries(run_id=run_id)
    assert row.last_error == ("refused before connecting: the URL's host is a loopback address, which is reached "
                              "only when allow-listed (notifications.allow_networks)")
    assert connects == [] and receiver.hits("/hook") == []
    # And with 127.0.0.1 allow-listed, the same receiver gets it
    allowed = make_runtime(channels, allow_networks=["127.0.0.1/32"])
    allowed.run(approval_plan(), {}, initiator="user:ana")
    assert deliverer(allowed).deliver_once().delivered == 1 and len(receiver.hits("/hook")) == 1
    assert [c[0] for c in connects] == ["127.0.0.1"]


@pytest.mark.parametrize("secret_url, kind", [
    ("http://169.254.169.254/latest/meta-data/iam/security-credentials/TOPSECRETTOKEN", "a cloud metadata address"),
    ("http://[fd00:ec2::254]/latest/api/TOPSECRETTOKEN", "a cloud metadata address"),
    ("https://10.0.0.7:8443/services/TOPSECRETTOKEN", "a private address"),
    ("http://[::ffff:10.0.0.1]:9/TOPSECRETTOKEN", "a private address"),
])
def test_a_secret_url_pointing_inside_the_network_is_refused_before_any_connection(make_runtime, connects,
                                                                                  secret_url, kind):
    # Given a Slack channel whose URL secret points at a metadata endpoint or the internal network, with only
    # 127.0.0.1 allow-listed
    rt = make_runtime({"finance": {"kind": "slack", "url": {"secret": "SLACK_URL"}}})
    (make_runtime.secrets / "SLACK_URL").write_text(secret_url)
    run_id = rt.run(approval_plan(), {}, initiator="user:ana").run.id
    # When delivered
    assert deliverer(rt).deliver_once().retried == 1
    # Then nothing was connected to, and the error names the kind of address, never the URL
    (row,) = rt.store.deliveries(run_id=run_id)
    assert row.last_error.startswith(f"refused before connecting: the URL's host is {kind}")
    assert connects == [] and "TOPSECRETTOKEN" not in row.last_error


def test_a_slack_channel_posts_an_incoming_webhook_body_to_its_secret_url(make_runtime, receiver, caplog):
    # Given a Slack channel whose URL is a secret
    rt = make_runtime({"finance": {"kind": "slack", "url": {"secret": "SLACK_URL"}}})
    secret_url = receiver.script("/services/T000/B000/XXXXSECRETTOKEN", [200])
    (make_runtime.secrets / "SLACK_URL").write_text(secret_url)
    run_id = rt.run(approval_plan(), {}, initiator="user:ana").run.id
    # When delivered
    assert deliverer(rt).deliver_once().delivered == 1
    # Then the body is text + blocks, with the summary, the facts and a button to the approvals page
    ((_, headers, body),) = receiver.hits("/services/T000/B000/XXXXSECRETTOKEN")
    doc = json.loads(body)
    assert set(doc) == {"text", "blocks"} and doc["text"].startswith("Approval needed: step 'ask'")
    assert [b["type"] for b in doc["blocks"]] == ["section", "section", "actions"]
    facts = " ".join(f["text"] for f in doc["blocks"][1]["fields"])
    assert run_id in facts and "role:manager (quorum 2)" in facts
    (button,) = doc["blocks"][2]["elements"]
    assert button["url"] == f"{PUBLIC}/ui/approvals#gate-{run_id}-ask"
    assert "webhook-signature" not in headers  # a Slack URL is its own credential


def test_a_missing_secret_fails_the_attempt_without_naming_its_value_and_is_retried(make_runtime, receiver, caplog):
    # Given a Slack channel whose URL secret is not there yet, and a failing Slack-like receiver
    rt = make_runtime({"finance": {"kind": "slack", "url": {"secret": "SLACK_URL"}}})
    run_id = rt.run(approval_plan(), {}, initiator="user:ana").run.id
    d = deliverer(rt)
    # When delivered
    with caplog.at_level(logging.INFO, logger="sealflow.notifications"):
        assert d.deliver_once().retried == 1
        # And once the secret is there but the receiver fails, the error names no URL
        secret_url = receiver.script("/services/T1/B1/TOPSECRETTOKEN", [404])
        (make_runtime.secrets / "SLACK_URL").write_text(secret_url)
        d.clock.advance(5)  # type: ignore[attr-defined]
        assert d.deliver_once().retried == 1
    (row,) = rt.store.deliveries(run_id=run_id)
    # Then the errors say what is wrong, and the URL (a credential) appears nowhere
    assert row.last_error == "HTTP 404" and row.attempts == 2
    assert "TOPSECRETTOKEN" not in caplog.text and "the secret SLACK_URL is not available" in caplog.text
    assert all("TOPSECRETTOKEN" not in json.dumps(a.detail or {}) for a in rt.store.audit(run_id))


@pytest.mark.parametrize("secret_url, error", [
    ("https://[::1/services/T2/B2/TOPSECRETTOKEN", "the URL is not an absolute http:// or https:// URL"),
    ("https://hooks.example.com:99999/services/T2/B2/TOPSECRETTOKEN", "the URL's port is not a number from 1 to "
                                                                      "65535"),
])
def test_a_secret_url_the_parser_refuses_is_a_clear_retried_error(make_runtime, caplog, secret_url, error):
    # Given a Slack channel whose URL secret is garbage to a URL parser (a bracket left open, a port out of range)
    rt = make_runtime({"finance": {"kind": "slack", "url": {"secret": "SLACK_URL"}}})
    (make_runtime.secrets / "SLACK_URL").write_text(secret_url)
    run_id = rt.run(approval_plan(), {}, initiator="user:ana").run.id
    # When delivered
    with caplog.at_level(logging.INFO, logger="sealflow.notifications"):
        assert deliverer(rt).deliver_once().retried == 1
    # Then the attempt fails with what is wrong (not an "internal error"), and the URL appears nowhere
    (row,) = rt.store.deliveries(run_id=run_id)
    assert row.last_error == error
    assert "TOPSECRETTOKEN" not in caplog.text and "Traceback" not in caplog.text


def test_a_long_lived_worker_delivers_on_its_own_thread(make_runtime, receiver):
    # Given a worker serving a runtime with a webhook channel
    rt = make_runtime({"ops": {"kind": "webhook", "url": receiver.script("/hook", [200]),
                               "secret": {"secret": "HOOK_SECRET"}}})
    stop = threading.Event()
    worker = threading.Thread(target=rt.serve, args=(stop,), kwargs={"allow_open": True, "interval": 0.05})
    worker.start()
    try:
        # When a run submitted elsewhere reaches its approval step
        run_id = rt.submit(approval_plan(), {}, initiator="user:ana")
        deadline = time.monotonic() + 20
        while not receiver.hits("/hook") and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        worker.join(timeout=10)
    # Then the worker's deliverer posted the notification without anyone calling it
    ((_, _, body),) = receiver.hits("/hook")
    assert json.loads(body)["data"]["run_id"] == run_id


def test_which_commits_open_a_gate():
    from sealflow.operations.notifications.gates import opened_gate
    from sealflow.store import Commit, NextAttempt, StepChange

    def waiting(data):
        return Commit(run_id="r", expected_rev=1, step=StepChange("ask", 1, 5, "waiting", data=data))

    # Given commits as the engine builds them / Then only a gate that opens (or re-opens) counts
    opened = {"opened_at": 10.0, "approvers": ["role:x"]}
    assert opened_gate(waiting(opened), {})[0] == "ask"  # an approval step, an agent's tool call
    assert opened_gate(waiting(opened), opened) is None  # an approval short of the quorum: same gate
    assert opened_gate(waiting({**opened, "opened_at": 20.0, "reopened": 1}), opened)[1]["reopened"] == 1
    assert opened_gate(waiting({"wake_at": 3}), {}) is None  # a `wait` step
    gate_next = Commit(run_id="r", expected_rev=1, next=NextAttempt("rec@gate", 1, "waiting", 99.0, 1000,
                                                                    "approval_timeout", opened))
    assert opened_gate(gate_next, {}) == ("rec@gate", opened, 99.0)  # requires_approval_if
    retry = Commit(run_id="r", expected_rev=1, next=NextAttempt("rec", 2, "retry_wait", 99.0, 1000, "backoff"))
    assert opened_gate(retry, {}) is None


def test_deliveries_are_counted_in_the_runtime_metrics_by_channel_kind(make_runtime, receiver, clock):
    # Given a webhook channel that answers 200 and a Slack channel that always fails, two attempts allowed
    rt = make_runtime({
        "ops": {"kind": "webhook", "url": receiver.script("/ok", [200]), "secret": {"secret": "HOOK_SECRET"}},
        "chat": {"kind": "slack", "url": {"secret": "SLACK_URL"}}}, max_attempts=2)
    (make_runtime.secrets / "SLACK_URL").write_text(receiver.script("/slack", [500]) + "\n")
    rt.run(approval_plan(), {}, initiator="user:ana")
    d = deliverer(rt)
    # When every delivery is tried until it is delivered or dead-lettered
    for _ in range(2):
        d.deliver_once()
        clock.advance(10)
    # Then the runtime's registry counts them by channel kind, and never names a URL
    text = rt.telemetry.metrics.exposition().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}

    def count(family, kind):
        return sum(s.value for s in families[family].samples
                   if s.name.endswith("_total") and s.labels == {"kind": kind})

    assert count("sealflow_notifications_delivered", "webhook") == 1
    assert count("sealflow_notifications_delivered", "slack") == 0
    assert count("sealflow_notification_attempts_failed", "slack") == 2
    assert count("sealflow_notifications_dead_lettered", "slack") == 1
    assert count("sealflow_notification_attempts_failed", "webhook") == 0
    assert receiver.url not in text and "127.0.0.1" not in text
