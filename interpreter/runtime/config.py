"""The runtime configuration: per-tenant limits, temporary storage, secrets.

Loaded from a YAML file named by ``--config FILE`` or ``SEALFLOW_CONFIG``
(no file: the defaults below, no tenant limits)::

    tenant_limits:
      "*":                         # every tenant not listed below
        max_queued_runs: 1000
      acme:
        daily_tokens: 2000000      # model tokens per UTC day, across the tenant's runs
        daily_cost_usd: 50         # model spend per UTC day
        max_queued_runs: 100       # runs not yet final (queued, running, waiting, ...)
        max_running_steps: 4       # step attempts running at once (bulkhead)
    tempdir:
      max_bytes: 100MiB            # per attempt; integer bytes or a size with KiB/MiB/GiB
      root: /var/tmp/sealflow      # default: the system temporary directory
    payloads:
      max_bytes: 2MiB              # a run's input, each step's output, a run's output, as stored JSON
    secrets:
      dir: /run/secrets            # default: $SEALFLOW_SECRETS_DIR
    pools:                         # step `concurrency: NAME` pools: at most N attempts at once, every
      email: 2                     # process and tenant together
      llm: {limit: 8}
      "*": 4                       # a pool not listed (default: 1, with a warning at submit)
    lost_attempts: 3               # a step's attempt lost this many times in a row (its worker died, stalled
                                   # or could not commit) is poison: the run is quarantined (1 to 20)
    outcome_unknown_timeout: 72h   # how long a lost attempt of an action that cannot deduplicate waits for a
                                   # person's decision before its step fails (worker_lost)

Other top-level keys are kept in :attr:`RuntimeConfig.extra` for the modules
that own them (e.g. ``access``); a misspelt key of the sections above is an
error that names it, never silently ignored.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any

from sealflow.core.config_maps import config_map
from sealflow.core.errors import ConfigError as ConfigError  # re-exported: callers catch it from here
from sealflow.core.jsonc import DEFAULT_MAX_PAYLOAD_BYTES
from sealflow.engine.poison import (
    DEFAULT_LOST_ATTEMPTS,
    DEFAULT_OUTCOME_UNKNOWN_TIMEOUT_MS,
    MAX_LOST_ATTEMPTS,
)
from sealflow.execution.tempfiles import DEFAULT_TEMPDIR_BYTES

ANY_TENANT = "*"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|KiB|MB|MiB|GB|GiB)?\s*$", re.I)
_UNITS = {"b": 1, "kb": 1000, "kib": 2**10, "mb": 1000**2, "mib": 2**20, "gb": 1000**3, "gib": 2**30}


@dataclasses.dataclass(frozen=True)
class TenantLimits:
    """Limits of one tenant; None means unlimited."""

    daily_tokens: int | None = None
    daily_cost_usd: float | None = None
    max_queued_runs: int | None = None
    max_running_steps: int | None = None

    @property
    def has_quota(self) -> bool:
        return self.daily_tokens is not None or self.daily_cost_usd is not None

    @property
    def admits_all(self) -> bool:
        """True when submit has nothing to check for this tenant."""
        return not self.has_quota and self.max_queued_runs is None


UNLIMITED = TenantLimits()


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    """What the runtime is configured with (see the module docstring for the file format)."""

    tenant_limits: Mapping[str, TenantLimits] = dataclasses.field(default_factory=dict)
    tempdir_max_bytes: int = DEFAULT_TEMPDIR_BYTES
    tempdir_root: str | None = None
    #: the most a run's input, a step's output or a run's output may weigh as stored JSON (UTF-8 bytes)
    payload_max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    secrets_dir: str | None = None
    source: str | None = None
    #: pool name -> its limit (step ``concurrency: NAME``)
    pools: Mapping[str, int] = dataclasses.field(default_factory=dict)
    #: consecutive losses of a step's attempt before it is poison (engine/poison.py)
    lost_attempts: int = DEFAULT_LOST_ATTEMPTS
    #: how long an outcome-unknown gate waits for a person (engine/poison.py)
    outcome_unknown_timeout_ms: int = DEFAULT_OUTCOME_UNKNOWN_TIMEOUT_MS
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def limits(self, tenant: str) -> TenantLimits:
        """The tenant's limits: its own entry, else the ``"*"`` entry, else unlimited."""
        got = self.tenant_limits.get(tenant)
        if got is None:
            got = self.tenant_limits.get(ANY_TENANT, UNLIMITED)
        return got

    @property
    def has_bulkheads(self) -> bool:
        return any(t.max_running_steps is not None for t in self.tenant_limits.values())

    def running_limit(self, tenant: str) -> int | None:
        """The tenant's ``max_running_steps`` (None: no bulkhead)."""
        return self.limits(tenant).max_running_steps

    # -- loading ---------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, *, source: str | None = None) -> RuntimeConfig:
        data = dict(data or {})
        where = source or "the runtime configuration"
        limits = {}
        raw_limits = data.pop("tenant_limits", None) or {}
        if not isinstance(raw_limits, Mapping):
            raise ConfigError(f"{where}: tenant_limits must be a map of tenant name to limits")
        for tenant, spec in raw_limits.items():
            limits[str(tenant)] = _tenant_limits(spec, f"{where}: tenant_limits.{tenant}")
        temp = _section(data.pop("tempdir", None), ("max_bytes", "root"), f"{where}: tempdir")
        secrets = _section(data.pop("secrets", None), ("dir",), f"{where}: secrets")
        max_bytes = parse_size(temp.get("max_bytes", DEFAULT_TEMPDIR_BYTES), f"{where}: tempdir.max_bytes")
        pools = _pools(data.pop("pools", None), f"{where}: pools")
        payloads = _section(data.pop("payloads", None), ("max_bytes",), f"{where}: payloads")
        payload_max = parse_size(payloads.get("max_bytes", DEFAULT_MAX_PAYLOAD_BYTES), f"{where}: payloads.max_bytes")
        if payload_max < 1024:
            raise ConfigError(f"{where}: payloads.max_bytes: {payload_max} bytes is too small to hold a run's "
                              "input or a step's output; give at least 1KiB")
        lost = data.pop("lost_attempts", DEFAULT_LOST_ATTEMPTS)
        if isinstance(lost, bool) or not isinstance(lost, int) or not 1 <= lost <= MAX_LOST_ATTEMPTS:
            raise ConfigError(f"{where}: lost_attempts must be a whole number from 1 to {MAX_LOST_ATTEMPTS} (how many "
                              f"times in a row a step's attempt may be lost before it is poison), not {lost!r}")
        unknown = _duration_ms(data.pop("outcome_unknown_timeout", None), DEFAULT_OUTCOME_UNKNOWN_TIMEOUT_MS,
                               f"{where}: outcome_unknown_timeout")
        if data.get("mcp") is not None:  # the MCP servers (kept in extra, read by the agent step): checked now
            from sealflow.execution.mcp.servers import parse_servers

            parse_servers(data["mcp"], locate=lambda keys: f"{where}: {'.'.join(keys)}")
        return cls(tenant_limits=limits, tempdir_max_bytes=max_bytes, tempdir_root=temp.get("root"),
                   payload_max_bytes=payload_max, secrets_dir=secrets.get("dir"), source=source, extra=data,
                   pools=pools, lost_attempts=lost, outcome_unknown_timeout_ms=unknown)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RuntimeConfig:
        import yaml

        try:
            with open(path, encoding="utf-8") as fh:
                data = yaml.safe_load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read the runtime configuration {os.fspath(path)}: "
                              f"{exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"the runtime configuration {os.fspath(path)} is not valid YAML: {exc}") from None
        if data is not None and not isinstance(data, Mapping):
            raise ConfigError(f"the runtime configuration {os.fspath(path)} must be a map at the top level")
        return cls.from_dict(data, source=os.fspath(path))

    @classmethod
    def from_env(cls, path: str | os.PathLike[str] | None = None) -> RuntimeConfig:
        """``path``, else ``$SEALFLOW_CONFIG``, else the defaults."""
        path = path or os.environ.get("SEALFLOW_CONFIG")
        return cls.load(path) if path else cls()


def parse_size(value: Any, where: str = "size") -> int:
    """Bytes from an integer or a text such as ``100MiB``, ``512 KB``, ``2GiB``."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: give a size such as 104857600 or 100MiB, not {value!r}")
    if isinstance(value, (int, float)):
        size = int(value)
    else:
        got = _SIZE.match(str(value))
        if got is None:
            raise ConfigError(f"{where}: {value!r} is not a size; write e.g. 104857600, 100MiB or 512KB")
        size = int(float(got.group(1)) * _UNITS[(got.group(2) or "b").lower()])
    if size < 0:
        raise ConfigError(f"{where}: a size cannot be negative")
    return size


def _duration_ms(raw: Any, default: int, where: str) -> int:
    """Milliseconds from a duration such as ``72h`` (None: ``default``), between one second and 30 days."""
    from sealflow.dsl.durations import DurationError, parse_ms

    if raw is None:
        return default
    try:
        ms: int | None = parse_ms(raw)
    except DurationError:
        ms = None
    if ms is None or not 1000 <= ms <= 30 * 86_400_000:
        raise ConfigError(f"{where}: {raw!r} is not a duration from 1s to 30d; write e.g. 72h or 2d")
    return ms


def _section(raw: Any, keys: tuple[str, ...], where: str) -> dict[str, Any]:
    return config_map(raw, keys, where, optional=True)


def _tenant_limits(raw: Any, where: str) -> TenantLimits:
    fields = {f.name for f in dataclasses.fields(TenantLimits)}
    spec = _section(raw, tuple(sorted(fields)), where)
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if value is None:
            continue
        number_type = float if key == "daily_cost_usd" else int
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"{where}.{key}: must be a number >= 0, not {value!r}")
        out[key] = number_type(value)
    return TenantLimits(**out)


_POOL_NAME = re.compile(r"^[a-z][a-z0-9_.-]*$")


def _pools(raw: Any, where: str) -> dict[str, int]:
    """``pools: {NAME: LIMIT}`` or ``{NAME: {limit: LIMIT}}`` (``"*"``: any pool not listed); limits >= 1."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a map of pool name to limit, e.g. pools: {{email: 2}}")
    out: dict[str, int] = {}
    for name, spec in raw.items():
        if str(name) != "*" and not _POOL_NAME.match(str(name)):
            raise ConfigError(f"{where}: pool name {name!r} must match [a-z][a-z0-9_.-]* (as in a step's concurrency:)")
        limit = _section(spec, ("limit",), f"{where}.{name}").get("limit") if isinstance(spec, Mapping) else spec
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"{where}.{name}: the limit must be an integer >= 1, not {limit!r}")
        out[str(name)] = limit
    return out
