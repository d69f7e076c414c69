"""API tokens: ``sf_<id>_<secret>``. The id names the token (listed, revoked, audited); the secret is 32
random bytes shown once at creation and stored only as its SHA-256 (a high-entropy secret needs no slow
hash). Checking compares hashes in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import uuid

from sealflow.store.records import ApiTokenRecord
from sealflow.store.serverstate import ServerStore

PREFIX = "sf_"
_TOKEN = re.compile(r"^sf_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
_DURATION = re.compile(r"^([1-9][0-9]{0,5})([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class TokenRejected(Exception):
    """A bearer token that does not authenticate; ``reason`` is short and stable (it is audited)."""

    def __init__(self, reason: str, message: str, token_id: str | None = None):
        super().__init__(message)
        self.reason = reason
        self.token_id = token_id


def digest(secret: str) -> str:
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


def parse_duration(text: str) -> float:
    """``90d``, ``12h``, ``30m``, ``45s`` -> seconds; anything else is a ValueError saying so."""
    m = _DURATION.match(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a duration; write a number and a unit, like 90d, 12h, 30m or 45s")
    return int(m.group(1)) * _UNIT[m.group(2)]


def create(store: ServerStore, principal: str, tenant: str, now: float, *, actor: str, expires_in: float | None = None,
           label: str | None = None) -> tuple[str, ApiTokenRecord]:
    """Mint a token: returns its text (shown once, never stored) and its record."""
    token_id = uuid.uuid4().hex[:16]
    secret = secrets.token_urlsafe(32)
    record = ApiTokenRecord(token_id, principal, tenant, now, actor, None if expires_in is None else now + expires_in,
                            None, label, digest(secret))
    store.create_api_token(record, now)
    return f"{PREFIX}{token_id}_{secret}", record


def looks_like_token(text: str) -> bool:
    return text.startswith(PREFIX)


def check(store: ServerStore, text: str, now: float) -> ApiTokenRecord:
    """The record of a usable token ``text``, else :class:`TokenRejected` (unknown, wrong secret, revoked,
    expired)."""
    m = _TOKEN.match(text)
    if m is None:
        raise TokenRejected("malformed", "the bearer token is not a Sealflow API token (sf_<id>_<secret>)")
    token_id, secret = m.groups()
    record = store.api_token(token_id)
    if record is None or not hmac.compare_digest(record.secret_hash, digest(secret)):
        raise TokenRejected("unknown-token", "the API token is not known here", token_id)
    if record.revoked_at is not None:
        raise TokenRejected("revoked", f"API token {token_id} was revoked", token_id)
    if record.expires_at is not None and now >= record.expires_at:
        raise TokenRejected("expired", f"API token {token_id} has expired", token_id)
    return record
