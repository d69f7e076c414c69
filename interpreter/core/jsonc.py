"""Compact JSON as the store records it (outputs, results, ledger entries)."""

from __future__ import annotations

import json
from typing import Any


def dumps(value: Any) -> str:
    """Compact JSON text of ``value``; ``TypeError``/``ValueError`` when it is not JSON (NaN included)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dumps_or_none(value: Any) -> str | None:
    """Like :func:`dumps`, None for a value that is not JSON."""
    try:
        return dumps(value)
    except (TypeError, ValueError):
        return None
