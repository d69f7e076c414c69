"""The OpenAPI document's security and error responses, and what ``OPTIONS`` answers.

The document declares its bearer security scheme (an API token or an OIDC ID token, ``Authorization: Bearer``)
and, per operation, only the problem responses that operation can give (:func:`responses_of`): those without
a credential (health, a signed event, a callback) say so with ``security: []``.

``OPTIONS`` on a path of the API answers 204 with ``Allow`` listing every method some route serves on it
(:class:`Options`), and a 405 lists the same (:func:`.problems.allowed`): not just the methods of the first route whose
path matched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.types import ASGIApp, Receive, Scope, Send

from sealflow.server import problems

SCHEME = "bearer"
#: operations that take no API credential: (method, path) -> how they are authenticated instead
OPEN = {("get", "/healthz"): "none", ("get", "/readyz"): "none",
        ("post", "/v1/events/{source}"): "the source's signature (Standard Webhooks)",
        ("post", "/v1/callbacks/{token}"): "the callback token in the path"}


def responses_of(method: str, path: str, secured: bool, has_body: bool) -> list[int]:
    """The problem statuses one operation may answer with."""
    statuses = {500, 503, 429}
    if secured:
        statuses |= {401, 403}
    if "{" in path:
        statuses |= {404, 422}
    if method in ("post", "put", "patch"):  # (a body may name what does not exist: a definition, a run)
        statuses |= {400, 404, 409, 413, 415, 422} if has_body else {404, 409}
    if method == "get" and path in ("/v1/runs", "/v1/notifications"):
        statuses.add(422)  # a filter or cursor that does not validate
    if path in ("/healthz",):
        statuses = {500}
    return sorted(statuses)


def document(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """``app.openapi``: FastAPI's document, with the bearer scheme and each operation's problem responses."""

    def build() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = get_openapi(title=app.title, version=app.version, routes=app.routes, description=app.description)
        components = doc.setdefault("components", {})
        components.setdefault("securitySchemes", {})[SCHEME] = {
            "type": "http", "scheme": "bearer",
            "description": "An API token (`sealflow tokens create`: sf_<id>_<secret>) or, when the server is "
                           "configured for OIDC, an ID token of the issuer"}
        components.setdefault("schemas", {}).setdefault("Problem", _problem_schema())
        doc["security"] = [{SCHEME: []}]
        documented = problems.documented()
        for path, item in doc.get("paths", {}).items():
            for method, operation in item.items():
                how = OPEN.get((method, path))
                if how is not None:
                    operation["security"] = []
                    operation["description"] = (operation.get("description", "") +
                                                f"\n\nAuthenticated by: {how}.").strip()
                answers = operation.setdefault("responses", {})
                answers.pop("422", None)  # FastAPI's validation error: ours is a problem (below, when it may occur)
                for status in responses_of(method, path, how is None, "requestBody" in operation):
                    answers[str(status)] = documented[status]
        app.openapi_schema = doc
        return doc

    return build


def _problem_schema() -> dict[str, Any]:
    from sealflow.server.schemas import Problem

    return Problem.model_json_schema()


class Options:
    """Answer ``OPTIONS`` on the API's paths: 204 with ``Allow`` (no credential needed: it tells nothing a
    405 would not); a path no route serves falls through (404)."""

    def __init__(self, app: ASGIApp, router: FastAPI | None = None) -> None:
        self.app = app
        self.router = router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "OPTIONS" or self.router is None:
            await self.app(scope, receive, send)
            return
        methods = problems.allowed(self.router.router, scope)
        if not methods:
            await self.app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 204,
                    "headers": [(b"allow", ", ".join(methods).encode()), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
