"""The ``notifications:`` section of the runtime configuration: where approval notifications go.

::

    notifications:
      public_url: https://sealflow.example.com   # links to /ui/approvals and /ui/runs/RUN (none without it)
      timeout: 10                  # seconds per request (default 10, at most 60)
      max_attempts: 8              # then the delivery is dead-lettered (default 8, at most 50)
      backoff: {first: 5, max: 600}  # seconds: exponential from `first`, capped at `max`, with jitter
      allow_networks: [10.20.0.0/16]  # optional: non-public addresses channels may reach (none by default)
      channels:
        ops:                       # a channel's name: [a-z][a-z0-9_.-]*
          kind: webhook            # a JSON POST signed per Standard Webhooks
          url: https://hooks.example.com/sealflow   # or {secret: NAME}
          secret: {secret: OPS_WEBHOOK_SECRET}      # whsec_<base64>; a reference, never the value
          workflows: [payments]    # optional: only gates of these workflows
          tenants: [acme]          # optional: only gates of these tenants
        finance:
          kind: slack              # a Slack incoming-webhook body (text + blocks)
          url: {secret: SLACK_FINANCE_URL}          # a Slack URL is a credential: a reference only

Every key is checked when the configuration is loaded; a mistake is a :class:`ConfigError` naming its path.
URLs must be ``http`` or ``https``. Where they may reach is checked at every delivery, after the host name is
resolved (:class:`~sealflow.operations.outbound.AddressGuard`): a public address, or one inside
``allow_networks``; loopback, link-local, private, unspecified, multicast and cloud metadata addresses are
refused unless allow-listed (docs/operations.md, docs/security.md).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from sealflow.core.config_maps import config_map
from sealflow.core.errors import ConfigError
from sealflow.operations.outbound import AddressGuard, Network, parse_networks, url_problem

KINDS = ("webhook", "slack")
_NAME = re.compile(r"^[a-z][a-z0-9_.-]*$")
_SECTION_KEYS = ("public_url", "timeout", "max_attempts", "backoff", "allow_networks", "channels")
#: what a refused address's message names as the way to allow it
ALLOW_KEY = "notifications.allow_networks"
_CHANNEL_KEYS = ("kind", "url", "secret", "workflows", "tenants")


@dataclasses.dataclass(frozen=True)
class Channel:
    name: str
    kind: str
    #: the URL itself, or None when it is a secret (``url_secret``)
    url: str | None
    url_secret: str | None
    #: the webhook signing secret's name (kind webhook)
    secret: str | None
    workflows: frozenset[str] | None = None
    tenants: frozenset[str] | None = None

    def wants(self, workflow: str, tenant: str) -> bool:
        """Whether a gate of ``workflow`` in ``tenant`` is notified on this channel."""
        return (self.workflows is None or workflow in self.workflows) and \
            (self.tenants is None or tenant in self.tenants)


@dataclasses.dataclass(frozen=True)
class NotifyConfig:
    channels: Mapping[str, Channel] = dataclasses.field(default_factory=dict)
    public_url: str | None = None
    timeout: float = 10.0
    max_attempts: int = 8
    backoff_first: float = 5.0
    backoff_max: float = 600.0
    #: the non-public networks channels may reach (``allow_networks``); public addresses need no entry
    allow_networks: tuple[Network, ...] = ()

    def link(self, path: str) -> str | None:
        return None if self.public_url is None else self.public_url + path

    @property
    def guard(self) -> AddressGuard:
        """Where a delivery may connect (:mod:`sealflow.operations.outbound`)."""
        return AddressGuard(self.allow_networks, ALLOW_KEY)


def check_url(url: str, where: str) -> str:
    """``url`` if it is an absolute http(s) URL with a host; else :class:`ConfigError` naming ``where``."""
    problem = url_problem(url)
    if problem is not None and "port" in problem:
        raise ConfigError(f"{where}: its port must be a number from 1 to 65535")
    if problem is not None:
        raise ConfigError(f"{where}: must be an absolute http:// or https:// URL (only those schemes are posted to)")
    return url


def load(config: Any) -> NotifyConfig:
    """The ``notifications:`` section of a :class:`~sealflow.runtime.config.RuntimeConfig` (or a
    mapping of top-level keys); an empty one when absent."""
    extra: Mapping[str, Any] = getattr(config, "extra", config) or {}
    where = f"{getattr(config, 'source', None) or 'the runtime configuration'}: notifications"
    if extra.get("notifications") is None:
        return NotifyConfig()
    raw = config_map(extra["notifications"], _SECTION_KEYS, where)
    public = raw.get("public_url")
    if public is not None:
        if not isinstance(public, str):
            raise ConfigError(f"{where}.public_url: must be an absolute http:// or https:// URL")
        public = check_url(public, f"{where}.public_url").rstrip("/")
    backoff = config_map(raw.get("backoff"), ("first", "max"), f"{where}.backoff", optional=True)
    first = _number(backoff.get("first", 5.0), f"{where}.backoff.first", 0.1, 3600)
    most = _number(backoff.get("max", 600.0), f"{where}.backoff.max", first, 86_400)
    raw_channels = raw.get("channels") or {}
    if not isinstance(raw_channels, Mapping):
        raise ConfigError(f"{where}.channels: must be a map of channel name to channel")
    channels = {str(name): _channel(str(name), spec, f"{where}.channels.{name}") for name, spec in raw_channels.items()}
    allowed = raw.get("allow_networks") or []
    if not isinstance(allowed, list):
        raise ConfigError(f"{where}.allow_networks: must be a list of IP networks (10.20.0.0/16) or addresses")
    try:
        networks = parse_networks(allowed)
    except ValueError as exc:
        raise ConfigError(f"{where}.allow_networks: {exc}") from None
    return NotifyConfig(channels, public, _number(raw.get("timeout", 10.0), f"{where}.timeout", 0.5, 60),
                        int(_number(raw.get("max_attempts", 8), f"{where}.max_attempts", 1, 50, integer=True)),
                        first, most, networks)


def _number(value: Any, where: str, low: float, high: float, *, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)) or not low <= value <= high:
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{where}: must be {kind} from {low:g} to {high:g}, not {value!r}")
    return float(value)


def _secret_ref(value: Any) -> str | None:
    if isinstance(value, Mapping) and set(value) == {"secret"} and isinstance(value["secret"], str) \
            and value["secret"]:
        return value["secret"]
    return None


def _names(value: Any, where: str) -> frozenset[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: must be a non-empty list of names")
    return frozenset(value)


def _channel(name: str, spec: Any, where: str) -> Channel:
    if not _NAME.match(name):
        raise ConfigError(f"{where}: a channel name must match [a-z][a-z0-9_.-]*")
    raw = config_map(spec, _CHANNEL_KEYS, where)
    kind = raw.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"{where}.kind: must be one of {', '.join(KINDS)}, not {kind!r}")
    url, url_secret = raw.get("url"), _secret_ref(raw.get("url"))
    if kind == "slack":
        if url_secret is None:
            raise ConfigError(f"{where}.url: a Slack webhook URL is a credential: write url: {{secret: NAME}} (an "
                              "inline URL is refused)")
        if raw.get("secret") is not None:
            raise ConfigError(f"{where}.secret: a slack channel is not signed (its URL is its credential); remove it")
        url = None
    elif url_secret is None:
        if not isinstance(url, str):
            raise ConfigError(f"{where}.url: must be an http(s) URL or {{secret: NAME}}")
        check_url(url, f"{where}.url")
    else:
        url = None
    secret = None
    if kind == "webhook":
        secret = _secret_ref(raw.get("secret"))
        if secret is None:
            raise ConfigError(f"{where}.secret: write secret: {{secret: NAME}} (a secret reference to a whsec_<base64> "
                              "signing secret; an inline secret is refused)")
    return Channel(name, kind, url, url_secret, secret, _names(raw.get("workflows"), f"{where}.workflows"),
                   _names(raw.get("tenants"), f"{where}.tenants"))
