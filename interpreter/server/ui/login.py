"""The ``/ui/oidc`` routes: the OIDC login flow (:mod:`..oidc_login`) opening the same kind of session as the
API-token sign-in.

``/ui/oidc/login`` sends the browser to the issuer with a fresh state (also set in an HttpOnly cookie,
``SameSite=Lax`` so that it comes back on the issuer's top-level redirect, scoped to ``/ui/oidc``, 10 minutes);
``/ui/oidc/callback`` checks the state against the cookie, exchanges the code, verifies the ID token and its
nonce, and starts a session that ends no later than the ID token's ``exp``. A refusal is audited
(``auth_failed``, method ``oidc``) and shown as a page; nothing of the provider's answer but its error code is
shown.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from sealflow.server.oidc_login import PENDING_FOR, STATE_COOKIE, LoginFlow, LoginRefused
from sealflow.server.ui.pages import _https, open_session, page, secure, sign_in_failed

router = APIRouter(prefix="/ui/oidc", include_in_schema=False)
_PATH = "/ui/oidc"


def _flow(request: Request) -> LoginFlow | None:
    return getattr(request.app.state, "oidc_login", None)


@router.get("/login")
def login(request: Request) -> Response:
    flow = _flow(request)
    if flow is None:
        return page("base.html", 404, error="the OIDC sign-in is not configured on this server; sign in with an "
                                             "API token")
    state, url = flow.begin()
    response = secure(RedirectResponse(url, status_code=303))
    response.set_cookie(STATE_COOKIE, state, max_age=int(PENDING_FOR), httponly=True, samesite="lax",
                        secure=_https(request), path=_PATH)
    return response


@router.get("/callback")
def callback(request: Request, code: str | None = None, state: str | None = None,
             error: str | None = None) -> Response:
    flow = _flow(request)
    if flow is None:
        return page("base.html", 404, error="the OIDC sign-in is not configured on this server")
    try:
        if error:
            raise LoginRefused("issuer-error", f"the identity provider refused the sign-in ({error[:80]})")
        principal, tenant, claims = flow.finish(state, request.cookies.get(STATE_COOKIE), code)
        # the session ends no later than the ID token (its exp, on the wall clock the token was checked against;
        # no leeway added), moved onto the runtime's clock
        left = float(claims["exp"]) - time.time()
        if left <= 0:
            raise LoginRefused("expired", "the ID token expired before a session could start (sign in again)")
    except LoginRefused as exc:
        sign_in_failed(request, exc.reason, "oidc")
        status = 403 if exc.reason in ("wrong-state", "unknown-state") else 401
        response = page("base.html", status, error=f"sign-in refused: {exc}")
        response.delete_cookie(STATE_COOKIE, path=_PATH)
        return response
    # a page, not a redirect: this answers the issuer's cross-site navigation, and the session's SameSite=Strict
    # cookie is sent from the next, same-site navigation (its meta refresh or link)
    expires_at = request.app.state.runtime.clock.now() + left
    response = open_session(request, page("signedin.html", principal=principal, tenant=tenant), principal, tenant,
                            "oidc", expires_at=expires_at)
    response.delete_cookie(STATE_COOKIE, path=_PATH)
    return response
