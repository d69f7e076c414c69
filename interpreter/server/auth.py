"""Who a request is: the credential's principal and tenant, never the request body's.

``Authorization: Bearer <token>`` carries an API token (``sf_...``, :mod:`.tokens`) or an OIDC JWT
(:mod:`.oidc`, when configured). No credential is refused (401) unless the server runs with
``--allow-open``, where an anonymous request acts as ``user:anonymous`` in tenant ``default``. Every
failed authentication is audited (``auth_failed``: the reason, the method, the client address, the token
id when there is one) and counts against the client address's rate limit, so guessing is slow and a flood
of failures cannot flood the audit log. Each authenticated principal has its own rate limit. Both limits
are counted in the store (:mod:`.ratelimit`): every server process on it shares them. Every failed
authentication, audited or past the burst, counts in the runtime's metrics
(``sealflow_policy_denials_total{error_class="unauthenticated", via="api"}``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from fastapi import Request

from sealflow.core.clock import Clock
from sealflow.server import tokens
from sealflow.server.oidc import OidcVerifier
from sealflow.server.problems import Problem
from sealflow.server.ratelimit import RateLimiter
from sealflow.server.tokens import TokenRejected
from sealflow.store.records import AuditEvent
from sealflow.store.serverstate import ServerStore

ANONYMOUS = "user:anonymous"
OPEN_TENANT = "default"
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_CHALLENGE = 'Bearer realm="sealflow"'


@dataclasses.dataclass(frozen=True)
class Credential:
    """Who acts: from an API token, an OIDC JWT, or (open mode only) nobody."""

    principal: str
    tenant: str
    method: str  # "token", "oidc" or "anonymous"
    token_id: str | None = None


class Authenticator:
    """Turns a request's ``Authorization`` header into a :class:`Credential` or a 401/429 problem."""

    def __init__(self, store: ServerStore, clock: Clock, *, audit: Callable[[AuditEvent], None],
                 oidc: OidcVerifier | None = None,
                 allow_open: bool = False, limiter: RateLimiter | None = None, failures: RateLimiter | None = None,
                 metrics: Any = None):
        #: the server's store (API tokens, its rate limits); refusals are audited through ``audit`` (the runtime's
        #: ``record``, which stamps them)
        self.store = store
        self.audit = audit
        #: the runtime's :class:`~sealflow.runtime.telemetry.metrics.Metrics` (None: not counted)
        self.metrics = metrics
        self.clock = clock
        self.oidc = oidc
        self.allow_open = allow_open
        self.limiter = limiter or RateLimiter(store, clock, 0, name="principal")
        #: failed authentications per client address: 1 a second, bursts of 10
        self.failures = failures or RateLimiter(store, clock, 1.0, 10.0, name="client")

    def __call__(self, request: Request) -> Credential:
        header = request.headers.get("authorization")
        if header is None:
            if self.allow_open:
                return self._limited(Credential(ANONYMOUS, OPEN_TENANT, "anonymous"))
            raise self._refuse(request, "missing", "none", "no credential: send Authorization: Bearer <token>")
        scheme, _, value = header.partition(" ")
        value = value.strip()
        if scheme.lower() != "bearer" or not value:
            raise self._refuse(request, "bad-scheme", "none", "the Authorization header must be 'Bearer <token>'")
        if tokens.looks_like_token(value):
            try:
                record = tokens.check(self.store, value, self.clock.now())
            except TokenRejected as exc:
                raise self._refuse(request, exc.reason, "token", str(exc), exc.token_id) from None
            return self._limited(Credential(record.principal, record.tenant, "token", record.id))
        if self.oidc is None:
            raise self._refuse(request, "malformed", "none", "the bearer token is not a Sealflow API token "
                                                             "(sf_<id>_<secret>) and no OIDC issuer is configured")
        try:
            principal, tenant, _claims = self.oidc.verify(value)
        except TokenRejected as exc:
            raise self._refuse(request, exc.reason, "oidc", str(exc)) from None
        if not _TENANT.match(tenant):
            raise self._refuse(request, "bad-tenant", "oidc", f"the JWT's tenant {tenant[:64]!r} is not a tenant name")
        return self._limited(Credential(principal, tenant, "oidc"))

    def _limited(self, cred: Credential) -> Credential:
        wait = self.limiter.take(cred.principal)
        if wait:
            raise Problem("rate-limited", f"{cred.principal} is over its rate limit; retry in {wait:.1f}s",
                          headers={"Retry-After": str(max(1, round(wait + 0.49)))})
        return cred

    def count_failure(self) -> None:
        """Count one failed authentication in the metrics (a bearer credential, a /ui sign-in)."""
        if self.metrics is not None:
            self.metrics.api_denied("unauthenticated")

    def _refuse(self, request: Request, reason: str, method: str, message: str, token_id: str | None = None
                ) -> Problem:
        client = request.client.host if request.client is not None else "unknown"
        self.count_failure()
        wait = self.failures.take("client:" + client)
        if wait:  # past the burst: refused without another audit event
            return Problem("rate-limited", f"too many failed authentications from {client}; retry in {wait:.0f}s",
                           headers={"Retry-After": str(max(1, round(wait + 0.49)))})
        detail = {"reason": reason, "method": method, "client": client, "path": request.url.path}
        if token_id:
            detail["token"] = token_id
        self.audit(AuditEvent("auth_failed", None, "anonymous", detail=detail, decision="deny"))
        return Problem("unauthenticated", message, headers={"WWW-Authenticate": _CHALLENGE}, reason=reason)
