"""The ``notifications:`` section of the runtime configuration: its documented shape reads; every mistake is a
ConfigError naming its path, checked when the runtime starts."""

from __future__ import annotations

import pytest

from sealflow.core.errors import ConfigError
from sealflow.operations.notifications import load
from sealflow.runtime.config import RuntimeConfig
from sealflow.runtime.facade import Runtime

HOOK = {"kind": "webhook", "url": "https://hooks.example.com/x", "secret": {"secret": "HOOK"}}


def read(section):
    return load(RuntimeConfig.from_dict({"notifications": section}, source="sealflow.yaml"))


def test_the_documented_shape_reads():
    # Given the section as docs/operations.md shows it
    got = read({"public_url": "https://sealflow.example.com/", "timeout": 5, "max_attempts": 4,
                "backoff": {"first": 2, "max": 60},
                "channels": {"ops": {**HOOK, "workflows": ["payments"], "tenants": ["acme"]},
                             "finance": {"kind": "slack", "url": {"secret": "SLACK_URL"}},
                             "relay": {"kind": "webhook", "url": {"secret": "RELAY_URL"}, "secret": {"secret": "S"}}}})
    # Then every value is read; a channel's filters decide which gates it hears of
    assert (got.public_url, got.timeout, got.max_attempts, got.backoff_first, got.backoff_max) == \
        ("https://sealflow.example.com", 5.0, 4, 2.0, 60.0)
    ops, finance, relay = got.channels["ops"], got.channels["finance"], got.channels["relay"]
    assert ops.wants("payments", "acme") and not ops.wants("refunds", "acme") and not ops.wants("payments", "globex")
    assert (finance.url, finance.url_secret, finance.secret) == (None, "SLACK_URL", None)
    assert (relay.url, relay.url_secret, relay.secret) == (None, "RELAY_URL", "S")
    # And no section means no channels
    assert load(RuntimeConfig.from_dict({})).channels == {}


@pytest.mark.parametrize("section, message", [
    ({"channel": {}}, "sealflow.yaml: notifications: unknown key 'channel'"),
    ({"public_url": "ftp://x"}, "notifications.public_url: must be an absolute http:// or https:// URL"),
    ({"timeout": 0}, "notifications.timeout: must be a number from 0.5 to 60"),
    ({"max_attempts": 2.5}, "notifications.max_attempts: must be an integer from 1 to 50"),
    ({"backoff": {"first": 10, "max": 5}}, "notifications.backoff.max: must be a number from 10 to 86400"),
    ({"channels": ["ops"]}, "notifications.channels: must be a map"),
    ({"channels": {"Ops!": HOOK}}, "notifications.channels.Ops!: a channel name must match"),
    ({"channels": {"ops": {**HOOK, "kind": "email"}}}, "notifications.channels.ops.kind: must be one of webhook, "
                                                       "slack, not 'email'"),
    ({"channels": {"ops": {**HOOK, "secret": "whsec_inline"}}}, "notifications.channels.ops.secret: write secret: "
                                                                "{secret: NAME}"),
    ({"channels": {"ops": {**HOOK, "url": "file:///etc/passwd"}}}, "notifications.channels.ops.url: must be an "
                                                                   "absolute http:// or https:// URL"),
    ({"channels": {"s": {"kind": "slack", "url": "https://hooks.slack.com/services/T/B/X"}}},
     "notifications.channels.s.url: a Slack webhook URL is a credential"),
    ({"channels": {"s": {"kind": "slack", "url": {"secret": "U"}, "secret": {"secret": "S"}}}},
     "notifications.channels.s.secret: a slack channel is not signed"),
    ({"channels": {"ops": {**HOOK, "workflows": "payments"}}}, "notifications.channels.ops.workflows: must be a "
                                                               "non-empty list of names"),
    ({"channels": {"ops": {**HOOK, "retries": 3}}}, "notifications.channels.ops: unknown key 'retries'"),
    # garbage a URL parser chokes on is the same clear error, never a ValueError traceback
    ({"public_url": "http://[::1"}, "notifications.public_url: must be an absolute http:// or https:// URL"),
    ({"channels": {"ops": {**HOOK, "url": "https://[::1/hook"}}}, "notifications.channels.ops.url: must be an "
                                                                  "absolute http:// or https:// URL"),
    ({"channels": {"ops": {**HOOK, "url": "https://hooks.example.com:99999/x"}}},
     "notifications.channels.ops.url: its port must be a number from 1 to 65535"),
    ({"public_url": "https://sealflow.example.com:http/"}, "notifications.public_url: its port must be a number"),
])
def test_a_mistake_is_an_error_naming_its_path(section, message):
    # Given a section with one mistake / When it is read / Then the error names where and what
    with pytest.raises(ConfigError) as err:
        read(section)
    assert message in str(err.value)


def test_a_runtime_refuses_to_start_on_an_invalid_section(tmp_path):
    # Given a configuration whose Slack channel has its URL inline
    config = RuntimeConfig.from_dict({"notifications": {"channels": {"s": {"kind": "slack", "url": "https://x"}}}})
    # When a runtime starts on it / Then it refuses, naming the key
    with pytest.raises(ConfigError, match="notifications.channels.s.url"):
        Runtime(f"sqlite:///{tmp_path}/rt.db", config=config)
