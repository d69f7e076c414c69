"""Callbacks (task tokens): an action step whose result a system it called posts later (``callback:``).

Before the action runs, the attempt gets a token: ``sfcb1.<run, step and attempt, base64url JSON>.<secret>``, the
secret 256 random bits. The action receives it as ``ctx.callback.token`` (and ``ctx.callback.url``, the runtime's
``callbacks.url`` with ``/v1/callbacks/{token}``), hands it to the system it calls, and returns at once; the step
then waits, holding no worker, with only the token's SHA-256 stored in the attempt. The system posts the result to
the URL (or an operator runs ``sealflow callbacks complete TOKEN``): the runtime finds the attempt the token names
and accepts the result only if the attempt still waits for this very token (same attempt, digest compared in
constant time) and its timeout has not passed (:mod:`sealflow.runtime.hearing`). A token is a capability: it names
one attempt of one run (so one tenant), is used once (the step moves on), dies with its attempt (a retry gets a new
one) and expires with the timeout. It is never written to the store, the audit trail or a log: they hold the first
16 hex digits of its digest.

Why a random secret checked against a stored digest rather than a token signed with a runtime key: the check needs
the store anyway (is the attempt still waiting?), so a signature adds a key to distribute, rotate and protect on
every worker and server, and proves nothing the digest does not; a store row read by an attacker does not give the
token away.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import secrets
from typing import Any

#: the token format's prefix and version
PREFIX = "sfcb1"
#: the longest token accepted (a run id, a step id, an attempt and the secret fit well within)
MAX_TOKEN = 512
#: attempt data: the callback the waiting attempt expects (``digest``, ``expires_at``, ``accepted``)
CALLBACK = "callback"


class CallbackRefused(Exception):
    """A callback is refused: ``reason`` is ``malformed``, ``unknown``, ``foreign_tenant``, ``superseded``,
    ``forged``, ``expired`` or ``invalid`` (its result fails the step's schema); the message says what."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclasses.dataclass(frozen=True)
class CallbackHandle:
    """``ctx.callback``: where and with what the called system posts the step's result."""

    #: the URL to POST the result to (None: the runtime has no ``callbacks.url``; use ``sealflow callbacks``)
    url: str | None = dataclasses.field(repr=False)
    token: str = dataclasses.field(repr=False)

    def __repr__(self) -> str:  # the URL holds the token: neither is shown
        return f"CallbackHandle(url={'<hidden>' if self.url else None}, token=<hidden>)"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def issue(run_id: str, step_id: str, attempt: int, base_url: str | None) -> tuple[CallbackHandle, str]:
    """A new token for attempt ``attempt`` of ``step_id`` of ``run_id``: the handle for the action, and the
    token's digest to store."""
    bound = _b64(json.dumps([run_id, step_id, attempt], separators=(",", ":")).encode())
    token = f"{PREFIX}.{bound}.{secrets.token_urlsafe(32)}"
    url = f"{base_url.rstrip('/')}/v1/callbacks/{token}" if base_url else None
    return CallbackHandle(url, token), digest(token)


def digest(token: str) -> str:
    """The token's SHA-256 (hex): what the store keeps."""
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def shown(token_digest: str) -> str:
    """How a token is named in the audit trail and logs: its digest's first 16 hex digits."""
    return token_digest[:16]


def parse(token: str) -> tuple[str, str, int]:
    """The (run id, step id, attempt) a token names; :class:`CallbackRefused` (``malformed``) otherwise."""
    parts = token.split(".") if isinstance(token, str) and len(token) <= MAX_TOKEN else []
    if len(parts) != 3 or parts[0] != PREFIX or not parts[2]:
        raise CallbackRefused("malformed", "not a callback token of this runtime")
    try:
        bound: Any = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, TypeError):
        raise CallbackRefused("malformed", "not a callback token of this runtime") from None
    if not (isinstance(bound, list) and len(bound) == 3 and isinstance(bound[0], str) and isinstance(bound[1], str)
            and isinstance(bound[2], int) and not isinstance(bound[2], bool)):
        raise CallbackRefused("malformed", "not a callback token of this runtime")
    return bound[0], bound[1], bound[2]


def base_url(config: Any) -> str | None:
    """The runtime configuration's ``callbacks.url`` (the server's public base URL), if any."""
    extra = getattr(config, "extra", None) or {}
    section = extra.get("callbacks") if isinstance(extra, dict) else None
    url = section.get("url") if isinstance(section, dict) else None
    return url if isinstance(url, str) and url else None
