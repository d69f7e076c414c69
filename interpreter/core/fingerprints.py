"""Failure fingerprints: equal for failures that are 'the same' across redrives.

(See :mod:`sealflow.runtime.dlq`.)

sha256 of the step id, the error class and the message with its volatile parts (numbers, hex ids, UUIDs,
quoted values) masked.
"""

from __future__ import annotations

import hashlib
import re

_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_HEX = re.compile(r"\b(?:0x)?[0-9a-f]{8,}\b", re.I)
_NUM = re.compile(r"\d+(?:\.\d+)?")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_SPACE = re.compile(r"\s+")


def normalise(message: str) -> str:
    """``message`` with ids, numbers and quoted values masked, lower case, spaces collapsed."""
    text = _UUID.sub("<uuid>", message or "")
    text = _HEX.sub("<hex>", text)
    text = _QUOTED.sub("<q>", text)
    text = _NUM.sub("<n>", text)
    return _SPACE.sub(" ", text).strip().lower()


def fingerprint(step_id: str | None, error_class: str, message: str) -> str:
    """The failure fingerprint: equal for failures that are 'the same' across redrives."""
    body = "\x1f".join((step_id or "<run>", error_class, normalise(message)))
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()
