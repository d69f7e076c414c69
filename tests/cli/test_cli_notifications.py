"""``sealflow notifications deliver --once`` and ``list [--failed]`` on a store whose run waits at a gate, with a
real local receiver; ``sealflow serve`` refuses an invalid notifications: section before it listens."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import yaml
from webhook_receivers import Receiver, standard_webhooks_signature

from sealflow.cli import main
from sealflow.store import open_store

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "definitions" / "lead-qualification.v1.yaml")
HIGH = json.dumps({"lead_id": "lead_acme"})  # classified high: waits for a sales manager
SECRET = "whsec_" + base64.b64encode(b"cli-notification-key-0123456789a").decode()


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write_config(tmp_path, channels, **section) -> str:
    secrets = tmp_path / "secrets"
    secrets.mkdir(exist_ok=True)
    (secrets / "HOOK_SECRET").write_text(SECRET)
    path = tmp_path / "sealflow-config.yaml"
    path.write_text(yaml.safe_dump({"secrets": {"dir": str(secrets)}, "notifications": {
        "public_url": "https://sealflow.example.com", "channels": channels,
        "allow_networks": ["127.0.0.1/32"],  # the test receivers listen on loopback, refused unless allow-listed
        **section}}))
    return str(path)


def test_deliver_once_posts_due_notifications_and_list_shows_the_failed_ones(tmp_path, capsys):
    with Receiver() as receiver:
        # Given two channels, one receiver that answers 200 and one that always fails (one attempt allowed)
        config = write_config(tmp_path, {
            "ok": {"kind": "webhook", "url": receiver.script("/ok", [200]), "secret": {"secret": "HOOK_SECRET"}},
            "down": {"kind": "webhook", "url": receiver.script("/down", [500]), "secret": {"secret": "HOOK_SECRET"}},
        }, max_attempts=1)
        store = f"sqlite:///{tmp_path}/state.db"
        # When a run stops at its approval gate
        code, out, err = cli(capsys, "--config", config, "run", EXAMPLE, "--input", HIGH, "--store", store, "--json")
        assert code == 3, err  # waiting
        run_id = json.loads(out)["run_id"]
        # Then two deliveries wait, and `deliver --once` posts them
        code, out, _ = cli(capsys, "notifications", "list", "--store", store, "--json")
        assert code == 0 and {(d["channel"], d["state"]) for d in json.loads(out)} == {("ok", "pending"),
                                                                                     ("down", "pending")}
        code, out, err = cli(capsys, "--config", config, "notifications", "deliver", "--once", "--store", store,
                             "--json")
        assert code == 0, err
        assert json.loads(out) == {"delivered": 1, "retried": 0, "failed": 1}
        ((_, headers, body),) = receiver.hits("/ok")
        assert headers["webhook-signature"] == standard_webhooks_signature(SECRET, headers["webhook-id"],
                                                                           headers["webhook-timestamp"], body)
        assert json.loads(body)["data"]["run_id"] == run_id
    # And `list --failed` shows the dead-lettered one with why, and nothing else
    code, out, _ = cli(capsys, "notifications", "list", "--failed", "--store", store)
    assert code == 0 and "failed" in out and "down" in out and "last error: HTTP 500" in out and " ok " not in out
    code, out, _ = cli(capsys, "notifications", "list", "--failed", "--store", store, "--json")
    (failed,) = json.loads(out)
    assert failed["run_id"] == run_id and failed["attempts"] == 1 and "payload" not in failed
    # And the run still waits for its approver
    code, out, _ = cli(capsys, "status", run_id, "--store", store, "--json")
    assert json.loads(out)["state"] == "waiting"


def test_deliver_without_channels_or_with_a_bad_section_is_a_usage_error(tmp_path, capsys):
    # Given no notifications section / When delivering / Then it says there is nothing to deliver to
    empty = tmp_path / "empty.yaml"
    empty.write_text("tempdir: {max_bytes: 1MiB}\n")
    code, _, err = cli(capsys, "--config", str(empty), "notifications", "deliver", "--once", "--store",
                       f"sqlite:///{tmp_path}/s.db")
    assert code == 2 and "has no notifications.channels" in err
    # Given a Slack channel with its URL inline / Then deliver and serve refuse it, naming the key
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"notifications": {"channels": {"s": {"kind": "slack", "url": "https://x"}}}}))
    for argv in (("notifications", "deliver", "--once"), ("serve", "--allow-open")):
        code, _, err = cli(capsys, "--config", str(bad), *argv, "--store", f"sqlite:///{tmp_path}/s.db")
        assert code == 2 and "notifications.channels.s.url: a Slack webhook URL is a credential" in err, argv


POLICY = {
    "operators": ["user:root"],
    "tenants": {
        "acme": {"roles": {"sales": ["crm:read", "crm:write", "email:send"], "ops": ["runs:*"]},
                 "members": {"user:alice": ["sales"], "user:olga": ["ops"]}},
        "globex": {"roles": {"ops": ["runs:*", "dlq:*"]}, "members": {"user:gus": ["ops"]}},
    },
}


def test_list_shows_only_the_deliveries_of_runs_the_principal_may_read(tmp_path, capsys):
    # Given an access policy and a run of tenant acme waiting at its gate, with a delivery to a channel
    policy = tmp_path / "access.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    config = write_config(tmp_path, {"ops": {"kind": "webhook", "url": "http://127.0.0.1:9/hook",
                                             "secret": {"secret": "HOOK_SECRET"}}})
    code, out, err = cli(capsys, "--config", config, "run", EXAMPLE, "--input", HIGH, "--json", "--as", "user:alice",
                         "--tenant", "acme", "--access", str(policy))
    assert code == 3, err
    run_id = json.loads(out)["run_id"]

    def listed(who, *more):
        code, out, err = cli(capsys, "notifications", "list", "--json", "--as", who, "--access", str(policy), *more)
        assert code == 0, err
        return [d["run_id"] for d in json.loads(out)]

    # When a member of another tenant lists deliveries (naming acme or not) / Then it sees none of acme's
    assert listed("user:gus") == [] and listed("user:gus", "--tenant", "acme") == []
    assert listed("user:gus", "--run", run_id) == []
    # And a principal in no tenant sees nothing either
    assert listed("user:mallory") == []
    # When acme's ops member, the initiator or an operator lists them / Then they see the run's delivery
    assert listed("user:olga") == [run_id] and listed("user:alice") == [run_id] and listed("user:root") == [run_id]


def test_deliver_is_for_operators_under_an_access_policy(tmp_path, capsys):
    # Given an access policy and a configured channel
    policy = tmp_path / "access.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    config = write_config(tmp_path, {"ops": {"kind": "webhook", "url": "http://127.0.0.1:9/hook",
                                             "secret": {"secret": "HOOK_SECRET"}}})
    # When a tenant's member runs the store-wide deliverer / Then it is refused with a sentence (exit 1)
    deliver = ("--config", config, "notifications", "deliver", "--once", "--json", "--access", str(policy))
    code, out, err = cli(capsys, *deliver, "--as", "user:gus")
    assert code == 1 and out == "" and "only an operator of the access policy" in err
    # And an operator may
    code, out, err = cli(capsys, *deliver, "--as", "user:root")
    assert code == 0 and json.loads(out) == {"delivered": 0, "retried": 0, "failed": 0}, err


def test_retry_requeues_a_failed_delivery_for_an_operator_only(tmp_path, capsys):
    with Receiver() as receiver:
        # Given an access policy and a delivery that failed for good (a receiver answering 500, then 200)
        policy = tmp_path / "access.yaml"
        policy.write_text(yaml.safe_dump(POLICY))
        config = write_config(tmp_path, {"ops": {"kind": "webhook", "url": receiver.script("/hook", [500, 200]),
                                                 "secret": {"secret": "HOOK_SECRET"}}}, max_attempts=1)
        store = f"sqlite:///{tmp_path}/state.db"
        access = ("--access", str(policy), "--store", store)
        code, out, err = cli(capsys, "--config", config, "run", EXAMPLE, "--input", HIGH, "--json", "--as",
                             "user:alice", "--tenant", "acme", *access)
        assert code == 3, err
        run_id = json.loads(out)["run_id"]
        deliver = ("--config", config, "notifications", "deliver", "--once", "--json", "--as", "user:root", *access)
        code, out, err = cli(capsys, *deliver)
        assert json.loads(out) == {"delivered": 0, "retried": 0, "failed": 1}, err
        code, out, _ = cli(capsys, "notifications", "list", "--failed", "--json", "--as", "user:root", *access)
        (failed,) = json.loads(out)
        # When a tenant's member retries it / Then it is refused with a sentence (exit 1), and nothing changes
        code, out, err = cli(capsys, "notifications", "retry", failed["id"], "--as", "user:olga", *access)
        assert code == 1 and out == "" and "only an operator of the access policy" in err
        # When an operator retries an unknown id / Then it is a usage error naming it
        code, _, err = cli(capsys, "notifications", "retry", "ntf_nope", "--as", "user:root", *access)
        assert code == 2 and "no notification delivery 'ntf_nope'" in err
        # When an operator retries the failed one / Then it is pending again and the next round delivers it
        code, out, err = cli(capsys, "notifications", "retry", failed["id"], "--json", "--as", "user:root", *access)
        assert code == 0 and json.loads(out)["state"] == "pending" and json.loads(out)["previous_attempts"] == 1, err
        code, out, err = cli(capsys, *deliver)
        assert json.loads(out) == {"delivered": 1, "retried": 0, "failed": 0}, err
        assert len(receiver.hits("/hook")) == 2
    # And retrying it again is refused: it is no longer failed
    code, _, err = cli(capsys, "notifications", "retry", failed["id"], "--as", "user:root", *access)
    assert code == 1 and "is delivered, not failed" in err
    # And the run's audit trail names the operator who retried it
    opened = open_store(store)
    try:
        events = [e for e in opened.audit(run_id) if e.event == "notification_retried"]
    finally:
        opened.close()
    assert [(e.actor, e.detail["notification"]) for e in events] == [("user:root", failed["id"])]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_running_deliverer_serves_its_counts_as_metrics(tmp_path, capsys):
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    with Receiver() as receiver:
        # Given a run waiting at its gate, with one delivery due to a receiver that answers 200
        config = write_config(tmp_path, {"ok": {"kind": "webhook", "url": receiver.script("/ok", [200]),
                                                "secret": {"secret": "HOOK_SECRET"}}})
        store = f"sqlite:///{tmp_path}/state.db"
        code, _, err = cli(capsys, "--config", config, "run", EXAMPLE, "--input", HIGH, "--store", store)
        assert code == 3, err
        # When `notifications deliver` keeps running with --metrics-port (as a cron-less deployment runs it)
        port = _free_port()
        proc = subprocess.Popen([sys.executable, "-m", "sealflow", "--config", config, "notifications", "deliver",
                                 "--store", store, "--interval", "0.1", "--metrics-port", str(port)],
                                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE,
                                text=True)
        try:
            # Then its /metrics counts the delivery by channel kind, and the store's state is there too
            deadline, text = time.monotonic() + 30, ""
            while 'sealflow_notifications_delivered_total{kind="webhook"} 1.0' not in text:
                assert proc.poll() is None and time.monotonic() < deadline, (text, proc.stderr and proc.stderr.read())
                time.sleep(0.1)
                try:
                    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
                except OSError:
                    continue
            assert 'sealflow_runs{state="waiting"} 1.0' in text
            assert len(receiver.hits("/ok")) == 1
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_metrics_port_with_once_is_a_usage_error(tmp_path, capsys):
    # Given a configuration with a channel / When `deliver --once` is given --metrics-port
    config = write_config(tmp_path, {"ok": {"kind": "webhook", "url": "http://127.0.0.1:9/x",
                                            "secret": {"secret": "HOOK_SECRET"}}})
    code, _, err = cli(capsys, "--config", config, "notifications", "deliver", "--once", "--metrics-port", "9999",
                       "--store", f"sqlite:///{tmp_path}/state.db")
    # Then it says a round that ends cannot be scraped, and delivers nothing
    assert code == 2 and "--metrics-port is for a deliverer that keeps running" in err
