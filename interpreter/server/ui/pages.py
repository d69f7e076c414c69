"""The ``/ui`` routes: sign-in with an API token, the approvals waiting for me (approve or reject bound to
the payload hash shown), and what every page shares (:func:`page`, :func:`session_of`, :func:`form_of`); the
runs pages are :mod:`.runs`.

Every response carries :data:`CSP` and the other headers of :func:`secure`; every form post is checked
against the session's CSRF token before anything else; a decision goes through the API's own rules
(:func:`..routes.approvals.decide`: membership, the gate's approvers, the payload hash)."""

from __future__ import annotations

import datetime as dt
import json
import re
import secrets
import urllib.parse
from importlib import resources
from typing import Any

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from sealflow.server import problems, tokens
from sealflow.server.auth import Credential
from sealflow.server.problems import Problem
from sealflow.server.routes import approvals as approvals_api
from sealflow.server.schemas import Decision
from sealflow.server.tokens import TokenRejected
from sealflow.server.ui.sessions import COOKIE, Session, Sessions
from sealflow.store.base import AuditEvent

#: scripts only from the server itself (the run page's live update, static/live.js, and the runs list's refresh,
#: static/listrefresh.js: progressive enhancement)
CSP = ("default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
#: the CSRF token of the sign-in form (no session yet): a double-submit cookie
PRE_COOKIE = "sealflow_signin"
_ENV = jinja2.Environment(loader=jinja2.PackageLoader("sealflow.server.ui", "templates"),
                          autoescape=True)
_CSS = resources.files("sealflow.server.ui").joinpath("static/ui.css").read_bytes()
_JS = resources.files("sealflow.server.ui").joinpath("static/live.js").read_bytes()
_LIST_JS = resources.files("sealflow.server.ui").joinpath("static/listrefresh.js").read_bytes()

router = APIRouter(prefix="/ui", include_in_schema=False)


def secure(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-store"
    return response


def page(name: str, status: int = 200, **values: Any) -> Response:
    values.setdefault("session", None)
    values.setdefault("notice", None)
    values.setdefault("error", None)
    return secure(HTMLResponse(_ENV.get_template(name).render(**values), status_code=status))


def _sessions(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.ui_sessions
    return sessions


def session_of(request: Request) -> Session | None:
    """The request's session, while the token it was started with is still usable."""
    session = _sessions(request).get(request.cookies.get(COOKIE))
    if session is None or session.token_id is None:
        return session
    rt = request.app.state.runtime
    record = request.app.state.server_store.api_token(session.token_id)
    now = rt.clock.now()
    if record is None or record.revoked_at is not None or (record.expires_at is not None and now >= record.expires_at):
        _sessions(request).end(session.id)
        return None
    return session


def viewer(request: Request) -> tuple[Session, Any] | Response:
    """The session and the runtime of a page's request; without a session, the way to sign in."""
    session = session_of(request)
    if session is None:
        return to_signin()
    return session, request.app.state.runtime


def to_signin() -> Response:
    return secure(RedirectResponse("/ui/signin", status_code=303))


def _https(request: Request) -> bool:
    return request.url.scheme == "https"


def when(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


#: what a message written for the command line says, as a page says it
_CLI_WORDS = ((re.compile(r"\s*\((?:--[a-z-]+(?: [A-Z]+)?(?:, | or )?)+\)"), ""),
              (re.compile(r"`sealflow runs list`"), "the Runs page"),
              (re.compile(r"`sealflow dlq redrive [^`]*`"), "redrive it from the Dead letters page"),
              (re.compile(r"`sealflow approvals list`"), "the Approvals page"))


def speak(text: str) -> str:
    """A runtime's message as a page says it: without command-line flags, naming pages instead of commands."""
    for pattern, words in _CLI_WORDS:
        text = pattern.sub(words, text)
    return text


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


async def _fields(request: Request) -> dict[str, str]:
    """A urlencoded form's fields (the first of each name); anything else posted is no fields at all."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        return {}
    body = (await request.body()).decode("utf-8", "replace")
    return {k: v[0] for k, v in urllib.parse.parse_qs(body, keep_blank_values=True, max_num_fields=20).items()}


async def form_of(request: Request, session: Session | None) -> dict[str, str] | Response:
    """The posted form, or the refusal of a post without the session's CSRF token."""
    try:
        form = await _fields(request)
    except ValueError:
        form = {}
    if session is None:
        return to_signin()
    if not session.csrf_ok(form.get("csrf_token")):
        return page("base.html", 403, session=session, error="refused: the form's CSRF token is missing or wrong "
                                                                "(reload the page and try again)")
    return form


async def posted(request: Request) -> tuple[Session, dict[str, str]] | Response:
    """The session and the form of a post that carries its CSRF token; else the refusal to answer with."""
    session = session_of(request)
    form = await form_of(request, session)
    if isinstance(form, Response):
        return form
    assert session is not None  # (form_of sends a post without a session to sign in)
    return session, form


def sign_in_failed(request: Request, reason: str, method: str, token_id: str | None = None) -> None:
    """Audit a refused sign-in (``auth_failed``), unless the client is past its burst of failures."""
    rt, auth = request.app.state.runtime, request.app.state.authenticator
    client = request.client.host if request.client is not None else "unknown"
    auth.count_failure()
    if auth.failures.take("client:" + client):
        return
    detail = {"reason": reason, "method": method, "client": client, "path": request.url.path}
    if token_id:
        detail["token"] = token_id
    rt.record(AuditEvent("auth_failed", None, "anonymous", detail=detail, decision="deny"))


def _audit_session(request: Request, event: str, session: Session) -> None:
    """Audit a sign-in or sign-out (``ui_signed_in``, ``ui_signed_out``): the principal, its tenant, the method
    (``token``, ``oidc``), the API token's id and the client's address; never the session id or a token."""
    rt = request.app.state.runtime
    detail = {"method": session.method, "tenant": session.tenant,
              "client": request.client.host if request.client is not None else "unknown"}
    if session.token_id:
        detail["token"] = session.token_id
    rt.record(AuditEvent(event, None, session.principal, detail=detail, tenant=session.tenant))


def open_session(request: Request, response: Response, principal: str, tenant: str, method: str,
                 token_id: str | None = None, *, expires_at: float | None = None) -> Response:
    """Start a session (a new id at every sign-in: no session fixation), audit it (``ui_signed_in``) and set its
    cookie on ``response``; ``expires_at`` (runtime clock) ends it earlier than the configured limit."""
    _sessions(request).end(request.cookies.get(COOKIE))
    session = _sessions(request).start(principal, tenant, method, token_id, expires_at=expires_at)
    _audit_session(request, "ui_signed_in", session)
    response.set_cookie(COOKIE, session.id, httponly=True, samesite="strict", secure=_https(request), path="/ui")
    return response


@router.get("/static/ui.css")
def css() -> Response:
    return secure(Response(_CSS, media_type="text/css", headers={"Cache-Control": "max-age=3600"}))


@router.get("/static/live.js")
def live_js() -> Response:
    return secure(Response(_JS, media_type="text/javascript", headers={"Cache-Control": "max-age=3600"}))


@router.get("/static/listrefresh.js")
def list_refresh_js() -> Response:
    return secure(Response(_LIST_JS, media_type="text/javascript", headers={"Cache-Control": "max-age=3600"}))


@router.get("")
def home(request: Request) -> Response:
    return secure(RedirectResponse("/ui/approvals" if session_of(request) else "/ui/signin", status_code=303))


@router.get("/signin")
def signin_form(request: Request) -> Response:
    csrf = secrets.token_urlsafe(32)
    response = page("signin.html", csrf=csrf, oidc=getattr(request.app.state, "oidc_login", None) is not None)
    response.set_cookie(PRE_COOKIE, csrf, httponly=True, samesite="strict", secure=_https(request), path="/ui/signin")
    return response


@router.post("/signin")
async def signin(request: Request) -> Response:
    try:
        form = await _fields(request)
    except ValueError:
        form = {}
    sent, expected = form.get("csrf_token", ""), request.cookies.get(PRE_COOKIE, "")
    if not expected or not secrets.compare_digest(sent.encode(), expected.encode()):
        return page("base.html", 403, error="refused: the sign-in form's CSRF token is missing or wrong "
                                             "(reload the sign-in page)")
    rt = request.app.state.runtime
    token = form.get("token", "").strip()
    try:
        if not tokens.looks_like_token(token):
            raise TokenRejected("malformed", "that is not a Sealflow API token (sf_<id>_<secret>)")
        record = tokens.check(request.app.state.server_store, token, rt.clock.now())
    except TokenRejected as exc:
        sign_in_failed(request, exc.reason, "token", exc.token_id)
        csrf = secrets.token_urlsafe(32)
        response = page("signin.html", 401, csrf=csrf, error=f"sign-in refused: {exc}",
                         oidc=getattr(request.app.state, "oidc_login", None) is not None)
        response.set_cookie(PRE_COOKIE, csrf, httponly=True, samesite="strict", secure=_https(request),
                            path="/ui/signin")
        return response
    response = open_session(request, secure(RedirectResponse("/ui/approvals", status_code=303)), record.principal,
                            record.tenant, "token", record.id)
    response.delete_cookie(PRE_COOKIE, path="/ui/signin")
    return response


@router.post("/signout")
async def signout(request: Request) -> Response:
    session = session_of(request)
    form = await form_of(request, session)
    if isinstance(form, Response):
        return form
    assert session is not None
    _sessions(request).end(session.id)
    _audit_session(request, "ui_signed_out", session)
    response = to_signin()
    response.delete_cookie(COOKIE, path="/ui")
    return response


def _gates(rt: Any, session: Session) -> list[dict[str, Any]]:
    """The gates the session may decide, each with what a reviewer needs to judge it (``review``)."""
    from sealflow.server.ui.runview import seconds

    gates = []
    for gate in rt.approvals_to_review(session.principal, session.tenant):
        review = gate["review"]
        will_run = review.get("will_run")
        gates.append(dict(gate, asked_at=when(gate.get("opened_at")), expires_at=when(gate.get("due_at")),
                          show_text=pretty(gate.get("show")), input_text=pretty(gate.get("input")),
                          message=gate.get("message"), time_left=seconds(review.get("time_left_s")),
                          args_text=pretty(will_run["args"]) if will_run and will_run.get("args") is not None else None,
                          proposals=[dict(p, answer_text=pretty(p["answer"]) if p["answer"] is not None
                                          else (p["answer_truncated"] or {}).get("preview"))
                                     for p in review.get("proposals", ())]))
    return gates


@router.get("/approvals")
def approvals(request: Request, notice: str | None = None) -> Response:
    got = viewer(request)
    if isinstance(got, Response):
        return got
    session, rt = got
    return page("approvals.html", session=session, gates=_gates(rt, session),
                 notice={"approved": "Approved.", "rejected": "Rejected."}.get(notice or ""))


def _edited(text: str | None, rt: Any, session: Session, run_id: str, step_id: str) -> tuple[Any] | None:
    """The payload an approver sent back from an editable gate's field, when it differs from what the gate shows
    (None: approved as shown); ValueError when it is not JSON."""
    if text is None or not text.strip():
        return None
    value = json.loads(text)  # (a ValueError: refused as a bad form, nothing decided)
    shown = next((g.get("show") for g in rt.approvals_waiting(session.principal, session.tenant)
                  if g.get("run_id") == run_id and g.get("step") in (step_id, f"{step_id}@gate")), None)
    return None if value == shown else (value,)


@router.post("/approvals/{run_id}/{step_id}")
async def decide(request: Request, run_id: str, step_id: str) -> Response:
    got = await posted(request)
    if isinstance(got, Response):
        return got
    session, form = got
    rt = request.app.state.runtime
    try:
        body = Decision(decision=form.get("decision", ""), reason=form.get("reason", ""),
                        payload_hash=form.get("payload_hash", ""))
    except ValueError:
        return page("approvals.html", 422, session=session, gates=_gates(rt, session),
                     error="refused: the decision must be approve or reject, with the payload hash shown")
    try:
        edited = _edited(form.get("edit"), rt, session, run_id, step_id) if body.decision == "approve" else None
    except ValueError as exc:
        return page("approvals.html", 422, session=session, gates=_gates(rt, session),
                     error=f"refused: the edited payload is not JSON ({exc}); nothing was decided")
    try:
        if edited is not None:
            body = Decision(decision=body.decision, reason=body.reason, payload_hash=body.payload_hash, edit=edited[0])
    except ValueError:
        return page("approvals.html", 422, session=session, gates=_gates(rt, session),
                     error="refused: the decision must be approve or reject, with the payload hash shown")
    caller = Credential(session.principal, session.tenant, session.method)
    try:
        approvals_api.decide(run_id, step_id, body, caller, rt)
    except Exception as exc:  # noqa: BLE001 - what the API would answer, as a page
        problem = exc if isinstance(exc, Problem) else problems.from_exception(exc)
        if problem is None:
            raise
        problems.count(request, exc, problem)
        return page("approvals.html", problem.status, session=session, gates=_gates(rt, session),
                     error=f"refused: {speak(problem.detail)}")
    done = "approved" if body.decision == "approve" else "rejected"
    return secure(RedirectResponse(f"/ui/approvals?notice={done}", status_code=303))
