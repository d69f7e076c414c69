"""JSON Schemas shipped with Sealflow: the workflow language and output schemas used by definitions."""

from __future__ import annotations

import functools
import json
import pathlib
from typing import Any

WORKFLOW = "workflow.schema.json"


def path(name: str = WORKFLOW) -> pathlib.Path:
    """Path of the schema file ``name`` (found next to this module, so it works when installed)."""
    return pathlib.Path(__file__).with_name(name)


@functools.cache
def load(name: str = WORKFLOW) -> dict[str, Any]:
    """The parsed schema ``name``, cached: treat it as read-only (copy it before changing it)."""
    with path(name).open(encoding="utf-8") as f:
        schema: dict[str, Any] = json.load(f)
    return schema
