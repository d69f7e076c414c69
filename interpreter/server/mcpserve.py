"""``sealflow mcp serve``: the project's workflows offered as MCP tools to a model client (the official SDK's
low-level server), over stdio or Streamable HTTP on 127.0.0.1.

Each offered workflow is one tool named after it, whose input schema is the workflow's input schema and whose
description says which version and who signed it. ``run_status`` (read only) gives a run's state. Who calls is
an API token's principal (``sealflow tokens create``): on HTTP the request's ``Authorization: Bearer`` token,
checked on every request; on stdio the token the process was started with (``--token``/``$SEALFLOW_MCP_TOKEN``),
checked on every call. There is no ambient identity: no token, no call. A call starts a run *as that
principal* through the :class:`~sealflow.runtime.facade.Runtime` facade, so the access policy decides what it
may start, exactly as for ``sealflow run`` or ``POST /v1/runs``; then the run is driven until it settles. A run
that waits for a person answers at once with its state, the gate it waits at and the approvals page's link.

What is offered is decided by the caller (:mod:`sealflow.cli.commands.mcp`): with a trust policy only the
definitions that verify (signed by a signer the policy trusts); in development mode (no trust policy) the
unsigned ones too, warned as ``run`` warns. A workflow that was not offered (unsigned under a trust policy,
invalid) is refused by name when called, saying why.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from sealflow.runtime.facade import Runtime
    from sealflow.runtime.status import RunStatus

#: the read-only tool (workflow names have no ``_``: it cannot collide with one)
STATUS_TOOL = "run_status"


class Refused(Exception):
    """A call this server will not make: the message says why (never a traceback)."""


@dataclasses.dataclass(frozen=True)
class Offer:
    """A workflow offered as a tool; ``start(input, principal, tenant)`` submits a run and returns its id."""

    name: str
    version: int
    signer: str
    description: str
    input_schema: dict[str, Any]
    start: Callable[[Any, str, str], str]


@dataclasses.dataclass
class Front:
    """The MCP server's behaviour: its tools, who calls, what a call does."""

    rt: Runtime
    offers: dict[str, Offer]
    #: workflow name -> why it is not offered
    withheld: dict[str, str]
    #: the principal and tenant of a bearer token (None: none given); raises :class:`Refused`
    authenticate: Callable[[str | None], tuple[str, str]]
    #: where a person approves (``https://host/ui/approvals``); None: say the command
    approvals_url: str | None = None
    #: how long a call drives its run before it answers with the run's state (seconds)
    drive_timeout: float = 60.0

    def tools(self) -> list[Any]:
        from mcp import types

        out = [types.Tool(name=o.name, description=f"Start a run of the Sealflow workflow {o.name} v{o.version} "
                          f"(signed by {o.signer}). {o.description}".strip(), inputSchema=o.input_schema,
                          annotations=types.ToolAnnotations(readOnlyHint=False, destructiveHint=True))
               for o in sorted(self.offers.values(), key=lambda o: o.name)]
        out.append(types.Tool(name=STATUS_TOOL, description="Read a Sealflow run's state, output or error, and "
                              "what it waits for (read only).",
                              inputSchema={"type": "object", "required": ["run_id"], "additionalProperties": False,
                                           "properties": {"run_id": {"type": "string", "pattern": "^run_[0-9a-f]+$"}}},
                              annotations=types.ToolAnnotations(readOnlyHint=True)))
        return out

    def call(self, name: str, arguments: dict[str, Any], token: str | None) -> dict[str, Any]:
        """What a call answers (a :class:`Refused` becomes an error result)."""
        principal, tenant = self.authenticate(token)
        if name == STATUS_TOOL:
            return self.status(str(arguments.get("run_id", "")), principal, tenant)
        offer = self.offers.get(name)
        if offer is None:
            why = self.withheld.get(name)
            raise Refused(f"workflow {name!r} is not offered here: {why}" if why else f"no tool {name!r} here")
        from sealflow.core.errors import StepError

        try:
            run_id = offer.start(arguments, principal, tenant)
        except StepError as exc:  # Unauthorized (the access policy), an invalid input, a model not configured
            raise Refused(f"{exc.error_class}: {exc.message}") from None
        except Exception as exc:  # noqa: BLE001 - refusals of the store (admission, idempotency) read as they are
            raise Refused(f"{type(exc).__name__}: {exc}") from None
        return self.answer(self.rt.drive(run_id, until="settled", timeout=self.drive_timeout))

    def status(self, run_id: str, principal: str, tenant: str) -> dict[str, Any]:
        from sealflow.store import NotFound

        try:
            return self.answer(self.rt.status(run_id, tenant=tenant, actor=principal))
        except NotFound:  # one the caller may not read reads as unknown
            raise Refused(f"no run {run_id!r} that {principal} may read") from None

    def answer(self, status: RunStatus) -> dict[str, Any]:
        run = status.run
        out: dict[str, Any] = {"run_id": run.id, "state": run.state, "workflow": run.workflow,
                               "version": run.workflow_version}
        if run.state == "completed":
            out["output"] = run.output
        if run.error_class:
            out["error"] = {"class": run.error_class, "message": run.error_message}
        if status.waiting:
            out["waiting"] = {k: status.waiting[k] for k in ("step", "approvers", "quorum", "expires_at")
                              if k in status.waiting}
            out["approve_at"] = self.approvals_url or f"sealflow approve {run.id} (as an approver)"
        return out


def build(front: Front) -> Server:
    """The low-level MCP server of ``front``: tools listed, each call answered off the event loop."""
    import anyio
    from mcp import types
    from mcp.server.lowlevel import Server

    server: Server = Server("sealflow")

    @server.list_tools()  # type: ignore[no-untyped-call,untyped-decorator]
    async def list_tools() -> list[types.Tool]:
        return front.tools()

    @server.call_tool()  # type: ignore[untyped-decorator]
    async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
        token = _bearer(server)
        try:
            result = await anyio.to_thread.run_sync(front.call, name, arguments, token)
        except Refused as exc:
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"refused: {exc}")],
                                        isError=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(result, default=str))],
                                    structuredContent=json.loads(json.dumps(result, default=str)))

    return server


def _bearer(server: Any) -> str | None:
    """The bearer token of the HTTP request being answered (None on stdio, or when there is none)."""
    try:
        request = server.request_context.request
    except LookupError:
        return None
    header = request.headers.get("authorization") if request is not None else None
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def token_check(rt: Runtime) -> Callable[[str | None], tuple[str, str]]:
    """The principal and tenant of a Sealflow API token, checked now (revoked and expired ones refused)."""
    from sealflow.server.tokens import TokenRejected, check

    def authenticate(token: str | None) -> tuple[str, str]:
        if not token:
            raise Refused("no credential: an API token is required (sealflow tokens create)")
        try:
            record = check(rt.server_state(), token, rt.clock.now())
        except TokenRejected as exc:
            raise Refused(f"unauthenticated: {exc}") from None
        return record.principal, record.tenant

    return authenticate


def serve_stdio(front: Front) -> None:
    """Answer one client over stdin/stdout until it goes."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build(front)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


def serve_http(front: Front, port: int) -> None:
    """Serve Streamable HTTP on 127.0.0.1:``port`` at ``/mcp``; a request without a usable bearer token is a 401."""
    import contextlib

    import uvicorn
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    manager = StreamableHTTPSessionManager(build(front), stateless=True, json_response=True)

    class Endpoint:  # an ASGI app (a class instance: Starlette's Route hands it the raw scope)
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers") or []}
            scheme, _, value = headers.get("authorization", "").partition(" ")
            try:
                front.authenticate(value.strip() if scheme.lower() == "bearer" else None)
            except Refused as exc:
                response = JSONResponse({"error": str(exc)}, status_code=401,
                                        headers={"WWW-Authenticate": 'Bearer realm="sealflow"'})
                await response(scope, receive, send)
                return
            await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        async with manager.run():
            yield

    app = Starlette(routes=[Route("/mcp", endpoint=Endpoint())], lifespan=lifespan)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    uvicorn.Server(config).run()
