"""Reading one map of a configuration file: known keys only, numbers in range, errors that name the key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sealflow.core.errors import ConfigError


def config_map(raw: Any, keys: tuple[str, ...], where: str, *, optional: bool = False) -> dict[str, Any]:
    """``raw`` as a dict holding only ``keys`` (``optional``: None reads as empty); else :class:`ConfigError`
    naming ``where``, the first unknown key and the known ones."""
    if raw is None and optional:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a map with keys: {', '.join(keys)}")
    unknown = sorted(set(map(str, raw)) - set(keys))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(keys)}")
    return dict(raw)
