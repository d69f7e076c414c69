"""A client of the official MCP SDK (``mcp``): list a server's tools, call one tool. Synchronous to its caller.

Each listing and each call opens its own session (a stdio server is started for it and stopped after; a
Streamable HTTP session is opened and closed), so no state of one call leaks into the next and a crashed
server costs one call. Everything is bounded by the server's ``timeout`` (and by the attempt's deadline the
caller passes). **Nothing here retries**: a failure is a classified :class:`StepError` (``timeout``,
``unavailable``, ``unauthorized``, ``invalid_request``) and Sealflow's retry classes and breakers decide.

A stdio server gets the SDK's minimal environment (``PATH``, ``HOME``, ...) plus its ``env:``, never this
process's other variables; secret values (``{secret: NAME}``) are resolved by the secret chain here, when the
server is reached, and are remembered for redaction like every resolved secret.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sealflow.core.errors import StepError
from sealflow.execution.mcp.servers import McpServer, Secret

if TYPE_CHECKING:
    from mcp import ClientSession

    from sealflow.execution.secrets import SecretChain

T = TypeVar("T")
#: pages of tools read at most from one server (a server that pages forever is refused)
MAX_PAGES = 50


@dataclasses.dataclass(frozen=True)
class ListedTool:
    """A tool as the server lists it now."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None


@dataclasses.dataclass(frozen=True)
class ToolResult:
    """What one call returned: its content as JSON-able blocks, its structured content, whether it is an error."""

    content: list[dict[str, Any]]
    structured: dict[str, Any] | None
    is_error: bool


def _values(pairs: tuple[tuple[str, str | Secret], ...], chain: SecretChain | None) -> dict[str, str]:
    from sealflow.execution.secrets import SecretChain

    names = [v.name for _, v in pairs if isinstance(v, Secret)]
    resolved = (chain or SecretChain()).resolve(names) if names else {}
    return {k: resolved[v.name] if isinstance(v, Secret) else v for k, v in pairs}


def _run(server: McpServer, chain: SecretChain | None, deadline_s: float | None,
         work: Callable[[ClientSession], Awaitable[T]]) -> T:
    """Open a session with ``server``, run ``work`` in it and close it, within the timeout."""
    import tempfile

    timeout = server.timeout_ms / 1000
    if deadline_s is not None:
        timeout = min(timeout, max(deadline_s, 0.001))
    env = _values(server.env, chain)
    headers = _values(server.headers, chain)  # resolved before connecting: a missing secret is `configuration`
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as errlog:  # a stdio server's stderr
        return _session(server, work, timeout, env, headers, errlog)


def _session(server: McpServer, work: Callable[[ClientSession], Awaitable[T]], timeout: float, env: dict[str, str],
             headers: dict[str, str], errlog: Any) -> T:
    import anyio

    async def session() -> T:
        from mcp import ClientSession

        with anyio.fail_after(timeout):
            if server.command is not None:
                from mcp.client.stdio import StdioServerParameters, stdio_client

                params = StdioServerParameters(command=server.command, args=list(server.args), env=env or None)
                async with stdio_client(params, errlog=errlog) as (read, write), \
                        ClientSession(read, write, read_timeout_seconds=timedelta(seconds=timeout)) as s:
                    await s.initialize()
                    return await work(s)
            import httpx
            from mcp.client.streamable_http import streamable_http_client

            async with httpx.AsyncClient(headers=headers, timeout=timeout, follow_redirects=False) as http, \
                    streamable_http_client(str(server.url), http_client=http) as (read, write, _), \
                    ClientSession(read, write, read_timeout_seconds=timedelta(seconds=timeout)) as s:
                await s.initialize()
                return await work(s)

    try:
        return anyio.run(session)
    except StepError:
        raise
    except BaseException as exc:  # noqa: BLE001 - classified below; KeyboardInterrupt and SystemExit go on
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        failed = _classify(server, exc, timeout)
        said = _tail(errlog)
        raise StepError(failed.error_class, failed.message + (f" (its stderr ends: {said})" if said else "")) \
            from None


def _tail(errlog: Any, chars: int = 300) -> str:
    """The last ``chars`` of what a stdio server wrote to its stderr, on one line."""
    try:
        errlog.seek(0)
        text = errlog.read()
    except (OSError, ValueError):
        return ""
    return " ".join(text.split())[-chars:]


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def _classify(server: McpServer, exc: BaseException, timeout: float) -> StepError:
    leaves = _leaves(exc)
    first = leaves[0]
    what = f"MCP server {server.name!r} ({server.transport})"
    if any(isinstance(e, TimeoutError) for e in leaves):
        return StepError("timeout", f"{what} did not answer within {timeout:g}s")
    from mcp.shared.exceptions import McpError

    for e in leaves:
        status = getattr(getattr(e, "response", None), "status_code", None)
        if status in (401, 403):
            return StepError("unauthorized", f"{what} refused the credentials (HTTP {status})")
        if isinstance(e, McpError):
            code = getattr(getattr(e, "error", None), "code", None)
            if code == -32001 or "timed out" in str(e).lower():
                return StepError("timeout", f"{what} did not answer within {timeout:g}s")
            if code == -32000 or "connection closed" in str(e).lower():
                return StepError("unavailable", f"{what} closed the connection (did it start?)")
            return StepError("invalid_request", f"{what} answered with an error: {str(e)[:300]}")
    import anyio

    if isinstance(first, (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream)):
        return StepError("unavailable", f"{what} closed the connection (did it start?)")
    if isinstance(first, (OSError, ConnectionError)) or type(first).__module__.startswith(("httpx", "httpcore")):
        return StepError("unavailable", f"{what} cannot be reached: {type(first).__name__}: {str(first)[:200]}")
    return StepError("unavailable", f"{what} failed: {type(first).__name__}: {str(first)[:200]}")


def list_tools(server: McpServer, chain: SecretChain | None = None, *,
               deadline_s: float | None = None) -> list[ListedTool]:
    """Every tool ``server`` lists now (all pages), sorted by name."""

    async def work(s: ClientSession) -> list[ListedTool]:
        from mcp import types

        out: list[ListedTool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await s.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            out += [ListedTool(t.name, t.description or "", dict(t.inputSchema or {}),
                               dict(t.outputSchema) if t.outputSchema is not None else None) for t in page.tools]
            cursor = page.nextCursor
            if not cursor:
                return sorted(out, key=lambda t: t.name)
        raise StepError("invalid_request", f"MCP server {server.name!r} listed more than {MAX_PAGES} pages of tools")

    return _run(server, chain, deadline_s, work)


def call_tool(server: McpServer, tool: str, arguments: dict[str, Any], chain: SecretChain | None = None, *,
              deadline_s: float | None = None) -> ToolResult:
    """Call ``tool`` once with ``arguments`` (no retry)."""

    async def work(s: ClientSession) -> ToolResult:
        result = await s.call_tool(tool, arguments)
        content = [block.model_dump(mode="json", exclude_none=True) for block in result.content]
        structured = result.structuredContent
        return ToolResult(content, dict(structured) if structured is not None else None, bool(result.isError))

    return _run(server, chain, deadline_s, work)
