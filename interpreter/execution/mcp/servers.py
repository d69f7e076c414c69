"""The ``mcp:`` section (the project file's, else the runtime configuration's): the MCP servers by name.

.. code-block:: yaml

    mcp:
      time: {command: mcp-server-time, args: ["--local-timezone", "UTC"], timeout: 10s}          # stdio
      tickets: {url: "http://127.0.0.1:9000/mcp", headers: {Authorization: {secret: TICKETS_TOKEN}}}

A stdio server has ``command`` (and ``args``, ``env``); a Streamable HTTP server has ``url`` (and ``headers``).
``env`` and ``headers`` values are text or ``{secret: NAME}``, resolved by the secret chain when the server is
reached (:mod:`sealflow.execution.secrets`), never written anywhere. ``timeout`` bounds connecting and each
request (default 30s). ``calls_per_minute`` bounds the tool calls every worker sharing the store makes to it.
Errors name the server and the key; ``locate`` turns a key path into ``file:line:column``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

from sealflow.core.config_maps import config_map
from sealflow.core.errors import ConfigError
from sealflow.dsl.durations import DurationError, parse_ms

#: a server's name: it is part of every tool's name the model sees (``mcp.SERVER.TOOL``) and of the lock's keys
SERVER_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_SECRET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_HEADER = re.compile(r"^[A-Za-z0-9-]{1,64}$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
STDIO_KEYS = ("command", "args", "env", "timeout", "calls_per_minute")
HTTP_KEYS = ("url", "headers", "timeout", "calls_per_minute")
DEFAULT_TIMEOUT_MS = 30_000
MAX_TIMEOUT_MS = 600_000


@dataclasses.dataclass(frozen=True)
class Secret:
    """A value given as ``{secret: NAME}``: resolved when the server is reached."""

    name: str


Value = str | Secret


@dataclasses.dataclass(frozen=True)
class McpServer:
    """One configured MCP server: stdio (``command``) or Streamable HTTP (``url``)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, Value], ...] = ()
    url: str | None = None
    headers: tuple[tuple[str, Value], ...] = ()
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    #: tool calls this server takes per minute from every worker sharing the store (None: no limit)
    calls_per_minute: int | None = None

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    @property
    def secrets(self) -> tuple[str, ...]:
        """The secret names it needs to be reached."""
        return tuple(v.name for _, v in (*self.env, *self.headers) if isinstance(v, Secret))

    def describe(self) -> str:
        return f"{self.command} {' '.join(self.args)}".strip() if self.command is not None else str(self.url)


Locate = Callable[[tuple[str, ...]], str]


def parse_servers(raw: Any, *, locate: Locate) -> dict[str, McpServer]:
    """The servers of an ``mcp:`` section; :class:`ConfigError` names where (``locate(path)``) and what is wrong."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{locate(('mcp',))}: mcp: must be a map of server name to its command or url "
                          "(docs/project.md, \"MCP servers\")")
    out = {}
    for name, spec in raw.items():
        where = ("mcp", str(name))
        if not isinstance(name, str) or not SERVER_NAME.match(name):
            raise ConfigError(f"{locate(where)}: mcp: server name {name!r} must be lower case letters, digits and "
                              "'_', starting with a letter (at most 32)")
        out[name] = _server(name, spec, where, locate)
    return out


def _server(name: str, spec: Any, where: tuple[str, ...], locate: Locate) -> McpServer:
    label = f"mcp.{name}"
    if not isinstance(spec, Mapping) or ("command" in spec) == ("url" in spec):
        raise ConfigError(f"{locate(where)}: {label}: give either command: (a stdio server) or url: (a Streamable "
                          "HTTP server), not both and not neither")
    keys = STDIO_KEYS if "command" in spec else HTTP_KEYS
    try:
        data = config_map(spec, keys, label)
    except ConfigError as exc:
        raise ConfigError(f"{locate(where)}: {exc}") from None
    timeout = _timeout(data.get("timeout"), (*where, "timeout"), label, locate)
    rate = data.get("calls_per_minute")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int) or not 1 <= rate <= 1_000_000):
        raise ConfigError(f"{locate((*where, 'calls_per_minute'))}: {label}.calls_per_minute: must be a whole number "
                          f"from 1 to 1000000, not {rate!r}")
    if "command" in data:
        command = data["command"]
        if not isinstance(command, str) or not command.strip():
            raise ConfigError(f"{locate((*where, 'command'))}: {label}.command: must be the program to start")
        args = data.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool)
                                                 for a in args):
            raise ConfigError(f"{locate((*where, 'args'))}: {label}.args: must be a list of texts")
        env = _values(data.get("env"), (*where, "env"), f"{label}.env", _ENV, locate)
        return McpServer(name, command=command, args=tuple(str(a) for a in args), env=env, timeout_ms=timeout,
                         calls_per_minute=rate)
    url = data["url"]
    if not isinstance(url, str) or not re.match(r"^https?://[^\s/]+", url):
        raise ConfigError(f"{locate((*where, 'url'))}: {label}.url: must be an http:// or https:// URL of the "
                          "server's Streamable HTTP endpoint")
    headers = _values(data.get("headers"), (*where, "headers"), f"{label}.headers", _HEADER, locate)
    return McpServer(name, url=url, headers=headers, timeout_ms=timeout, calls_per_minute=rate)


def _timeout(raw: Any, where: tuple[str, ...], label: str, locate: Locate) -> int:
    if raw is None:
        return DEFAULT_TIMEOUT_MS
    try:
        ms = int(raw * 1000) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else parse_ms(str(raw))
    except DurationError:  # reworded with the place
        ms = 0
    if not 0 < ms <= MAX_TIMEOUT_MS:
        raise ConfigError(f"{locate(where)}: {label}.timeout: {raw!r} is not a duration from 1ms to 10m; write "
                          "e.g. 10s")
    return ms


def _values(raw: Any, where: tuple[str, ...], label: str, key: re.Pattern[str],
            locate: Locate) -> tuple[tuple[str, Value], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{locate(where)}: {label}: must be a map of name to a text or {{secret: NAME}}")
    out: list[tuple[str, Value]] = []
    for name, value in raw.items():
        at = (*where, str(name))
        if not isinstance(name, str) or not key.match(name):
            raise ConfigError(f"{locate(at)}: {label}: {name!r} is not a valid name")
        if isinstance(value, Mapping):
            secret = value.get("secret") if set(value) == {"secret"} else None
            if not isinstance(secret, str) or not _SECRET.match(secret):
                raise ConfigError(f"{locate(at)}: {label}.{name}: write {{secret: NAME}} (a secret's name: letters, "
                                  "digits, '_', '.', '-')")
            out.append((name, Secret(secret)))
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            out.append((name, str(value)))
        else:
            raise ConfigError(f"{locate(at)}: {label}.{name}: must be a text or {{secret: NAME}}")
    return tuple(sorted(out))


def servers_of(config: Any) -> dict[str, McpServer]:
    """The servers of a runtime configuration's ``mcp:`` (its ``extra``), already checked when it was read."""
    extra = getattr(config, "extra", None) or {}
    source = getattr(config, "source", None) or "the runtime configuration"
    return parse_servers(extra.get("mcp"), locate=lambda path: str(source))
