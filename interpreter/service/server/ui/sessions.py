"""Browser sessions of the ``/ui`` pages: a random session id in an HttpOnly, SameSite=Strict cookie (Secure
over https) names a server-side :class:`Session`; the API token used to sign in is never stored. Each session
has its own CSRF token (synchronizer pattern): a form post must carry it or it is refused."""

from __future__ import annotations

import dataclasses
import hmac
import secrets
import threading
import time

COOKIE = "sealflow_session"
#: a session ends after this many seconds without use (and at most after MAX_AGE)
IDLE = 30 * 60.0
MAX_AGE = 8 * 3600.0


@dataclasses.dataclass
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
    """The sessions of one server process (kept in memory: a restart signs everyone out)."""

    def __init__(self, idle: float = IDLE, max_age: float = MAX_AGE, now=time.monotonic):
        self._by_id: dict[str, Session] = {}
        self._lock = threading.Lock()
        self.idle = idle
        self.max_age = max_age
        self._now = now

    def start(self, principal: str, tenant: str, method: str, token_id: str | None = None) -> Session:
        now = self._now()
        session = Session(secrets.token_urlsafe(32), principal, tenant, method, secrets.token_urlsafe(32), now, now,
                          token_id)
        with self._lock:
            self._expire(now)
            self._by_id[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        now = self._now()
        with self._lock:
            session = self._by_id.get(session_id)
            if session is None:
                return None
            if now - session.used > self.idle or now - session.started > self.max_age:
                del self._by_id[session_id]
                return None
            session.used = now
            return session

    def end(self, session_id: str | None) -> None:
        with self._lock:
            self._by_id.pop(session_id or "", None)

    def _expire(self, now: float) -> None:
        for key in [k for k, s in self._by_id.items()
                    if now - s.used > self.idle or now - s.started > self.max_age]:
            del self._by_id[key]
