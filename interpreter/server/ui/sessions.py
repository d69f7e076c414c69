"""Browser sessions of the ``/ui`` pages: a random session id in an HttpOnly, SameSite=Strict cookie (Secure over
https) names a :class:`Session` kept in the store, so that every server process sharing the store knows it
(``--workers N``, several servers behind a load balancer, a restart). The store holds only the SHA-256 of the id
(like an API token's secret); the API token used to sign in is never stored, only its id. Each session has its
own CSRF secret (synchronizer pattern): a form post must carry it or it is refused.

A session ends after :data:`IDLE` seconds without use, :data:`MAX_AGE` seconds after it started (an OIDC session:
at its ID token's ``exp`` when that is sooner), or at sign-out (in every process at once); times are on the
runtime's clock (the database's on PostgreSQL). Its last use is written at most once a :data:`TOUCH` seconds, so
a page view is not a write each time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets

from sealflow.core.clock import Clock
from sealflow.store.serverstate import ServerStore, SessionRow

COOKIE = "sealflow_session"
#: a session ends after this many seconds without use (and at most after MAX_AGE)
IDLE = 30 * 60.0
MAX_AGE = 8 * 3600.0
#: the last use is recorded when it is older than this (the idle limit is this precise)
TOUCH = 60.0


def id_hash(session_id: str) -> str:
    """What the store keys a session by: the id is 32 random bytes, so a plain SHA-256 is enough."""
    return "sha256:" + hashlib.sha256(session_id.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Session:
    id: str
    principal: str
    tenant: str
    method: str
    csrf: str
    started: float
    used: float
    #: the API token signed in with (its id only): revoking or expiring it ends the session
    token_id: str | None = None

    def csrf_ok(self, sent: str | None) -> bool:
        return bool(sent) and hmac.compare_digest(self.csrf.encode(), str(sent).encode())


class Sessions:
    """The sessions of every server process on ``store``."""

    def __init__(self, store: ServerStore, clock: Clock, idle: float = IDLE, max_age: float = MAX_AGE,
                 touch: float = TOUCH):
        self.store = store
        self.clock = clock
        self.idle = idle
        self.max_age = max_age
        self.touch = min(touch, idle / 2)

    def start(self, principal: str, tenant: str, method: str, token_id: str | None = None, *,
              expires_at: float | None = None) -> Session:
        """A new session; it ends :attr:`max_age` seconds from now, or at ``expires_at`` (on the same clock)
        when that is sooner: an OIDC session ends with its ID token (``exp``)."""
        now = self.clock.now()
        session = Session(secrets.token_urlsafe(32), principal, tenant, method, secrets.token_urlsafe(32), now, now,
                          token_id)
        ends = now + self.max_age if expires_at is None else min(now + self.max_age, expires_at)
        self.store.session_put(SessionRow(id_hash(session.id), principal, tenant, method, token_id, session.csrf,
                                          now, now, self.idle, ends))
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id or len(session_id) > 128:
            return None
        row = self.store.session_get(id_hash(session_id), self.clock.now(), touch_after=self.touch)
        if row is None:
            return None
        return Session(session_id, row.principal, row.tenant, row.method, row.csrf, row.started_at, row.used_at,
                       row.token_id)

    def end(self, session_id: str | None) -> None:
        if session_id and len(session_id) <= 128:
            self.store.session_end(id_hash(session_id))
