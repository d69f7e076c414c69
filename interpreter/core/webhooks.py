"""Standard Webhooks signatures (https://www.standardwebhooks.com), the one implementation: what
``POST /v1/events`` verifies (:mod:`sealflow.server.events`) and what approval notifications sign
(:mod:`sealflow.operations.notifications`)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac


def decode_secret(value: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret (``whsec_`` + base64; the prefix is optional);
    ValueError when it is not base64."""
    text = value.strip()
    if text.startswith("whsec_"):
        text = text[len("whsec_"):]
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the secret is not whsec_<base64>") from None


def signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value: ``v1,`` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}"))."""
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()
