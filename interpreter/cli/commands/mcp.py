"""`sealflow mcp`: the project's MCP servers. ``lock`` pins the tools they list in ``sealflow.mcp.lock``.

``sealflow mcp lock`` reads the project's ``mcp:`` section (sealflow.yaml, else the runtime configuration's),
connects to each server (the official MCP SDK; secrets resolved by the secret chain), lists its tools and
writes ``sealflow.mcp.lock`` beside the project file: per tool its description, input and output schema and the
digest of each, sorted, so that a change reads as a diff in review (:mod:`sealflow.dsl.mcp_lock`). ``--check``
writes nothing and exits 1 when the servers no longer list what the lock holds (for CI). A server that cannot be
reached fails the command (exit 1) naming it; nothing is written then.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from sealflow.cli.exits import fail, fail_usage
from sealflow.cli.options import access_option, actions_option, store_option
from sealflow.cli.session import load_config, open_runtime, project, trust_path

if TYPE_CHECKING:
    from sealflow.cli.definition_files import Loaded
    from sealflow.runtime.facade import Runtime
    from sealflow.server.mcpserve import Offer


@click.group()
def mcp() -> None:
    """MCP: pin the project's servers' tools (lock); offer its workflows as MCP tools (serve)."""


@mcp.command("lock")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 when the lock is not what the servers list.")
def lock(check: bool) -> None:
    """Connect to every server of the project's mcp: section, list its tools and write sealflow.mcp.lock
    beside sealflow.yaml (description, input and output schema, and their digests, per tool)."""
    from sealflow.core.errors import StepError
    from sealflow.dsl import mcp_lock
    from sealflow.execution.mcp.client import list_tools
    from sealflow.execution.mcp.servers import servers_of
    from sealflow.execution.secrets import chain_for

    found = project()
    if found is None:
        fail_usage("sealflow mcp lock needs a project file (sealflow.yaml here or above, or --project FILE): the "
                   "lock is written beside it")
    config = load_config()
    servers = servers_of(config)
    if not servers:
        fail_usage(f"{found.path}: no mcp: servers to lock; name them under mcp: (docs/project.md)")
    chain = chain_for(config)
    tools: dict[str, mcp_lock.LockedTool] = {}
    for name, server in sorted(servers.items()):
        try:
            listed = list_tools(server, chain)
        except StepError as exc:
            fail(f"{exc.message}; nothing was written\n  hint: check mcp.{name} in {found.path} "
                 f"({server.describe()})")
        for t in listed:
            if not mcp_lock.TOOL_NAME.match(t.name):
                fail(f"MCP server {name!r} lists a tool named {t.name[:80]!r}, which is not a valid MCP tool "
                     "name; nothing was written")
            tools[f"{name}/{t.name}"] = mcp_lock.LockedTool(name, t.name, t.description, t.input_schema,
                                                            t.output_schema)
        click.echo(f"{name}: {len(listed)} tools ({server.describe()})", err=True)
    text = mcp_lock.render(tools)
    path = found.mcp_lock
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    if check:
        if old != text:
            click.echo("".join(difflib.unified_diff(old.splitlines(True), text.splitlines(True), str(path),
                                                    "what the servers list now")))
            fail(f"{path} is not what the servers list now; run `sealflow mcp lock` and review the change")
        click.echo(f"{path} is current ({len(tools)} tools)")
        return
    path.write_text(text, encoding="utf-8")
    click.echo(f"wrote {path} ({len(tools)} tools from {len(servers)} servers)"
               + ("" if old in ("", text) else "; review the change before committing it"))


@mcp.command("serve")
@click.argument("paths", nargs=-1, metavar="[PATH]...")
@click.option("--http", "port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Serve Streamable HTTP on 127.0.0.1:PORT/mcp (each request's Bearer API token says who calls); "
                   "default: stdio.")
@click.option("--token", envvar="SEALFLOW_MCP_TOKEN", metavar="TOKEN",
              help="stdio: the API token every call acts as ($SEALFLOW_MCP_TOKEN; `sealflow tokens create`).")
@click.option("--approvals-url", metavar="URL", help="The approvals page a waiting run's answer links to (e.g. "
              "https://sealflow.example/ui/approvals).")
@actions_option
@store_option
@access_option
@click.option("--trust", metavar="POLICY", envvar="SEALFLOW_TRUST",
              help="Trust policy: offer only the definitions whose signature (FILE.dsse.json or FILE.sigstore.json "
                   "beside each) it verifies. Without it, development mode: unsigned ones too, warned.")
def serve(paths: tuple[str, ...], port: int | None, token: str | None, approvals_url: str | None,
          actions: tuple[str, ...], store_url: str | None, access_path: str | None, trust: str | None) -> None:
    """Offer the project's workflows (PATH: files or folders, default definitions/) as MCP tools to a model
    client: with a trust policy only signed, verified ones; without one (development mode) unsigned ones too.
    Each call starts a run as the API token's principal."""
    from sealflow.server import mcpserve

    if port is None and not token:
        fail_usage("sealflow mcp serve over stdio needs --token TOKEN (or $SEALFLOW_MCP_TOKEN): every call acts "
                   "as that API token's principal, never as whoever started the process")
    with open_runtime(store_url, actions, access=access_path, trust=trust) as rt:
        offers, withheld = _offers(rt, paths or ("definitions",), actions, trust_path(trust))
        check = mcpserve.token_check(rt)
        if port is None:
            check(token)  # a bad token stops the server now, not at its first call
        front = mcpserve.Front(rt, offers, withheld, authenticate=check if port is not None else
                               (lambda _header: check(token)), approvals_url=approvals_url)
        click.echo(f"sealflow mcp serve: {len(offers)} workflows offered"
                   + (f", {len(withheld)} withheld ({', '.join(sorted(withheld))})" if withheld else "")
                   + (f"; Streamable HTTP on http://127.0.0.1:{port}/mcp" if port is not None else "; stdio"),
                   err=True)
        if port is not None:
            mcpserve.serve_http(front, port)
        else:
            mcpserve.serve_stdio(front)


def _offers(rt: Runtime, paths: tuple[str, ...], actions: tuple[str, ...],
            trust: str | None) -> tuple[dict[str, Offer], dict[str, str]]:
    """The workflows to offer (loaded, verified under a trust policy) and why each other one is withheld."""
    from sealflow.cli.definition_files import NotLoaded, expand_paths, try_load
    from sealflow.cli.session import project_actions, with_demo
    from sealflow.server.mcpserve import Offer

    specs = with_demo(project_actions(actions))
    offers: dict[str, Offer] = {}
    withheld: dict[str, str] = {}
    for path in expand_paths(paths):
        name = path.name.split(".v", 1)[0]
        try:
            loaded = try_load(str(path), specs, trust=trust)
        except NotLoaded as exc:
            withheld[name] = f"{exc.reason}: {exc.message}"
            continue
        plan = loaded.plan
        offers[plan.name] = Offer(plan.name, plan.version, loaded.signer, plan.description or "",
                                  dict(plan.input_schema or {"type": "object"}), _starter(rt, loaded))
    return offers, withheld


def _starter(rt: Runtime, loaded: Loaded) -> Callable[[Any, str, str], str]:
    def start(value: Any, principal: str, tenant: str) -> str:
        from sealflow.server.mcpserve import Refused
        from sealflow.store.definitions import DefinitionRefused

        try:
            return rt.submit(loaded.plan, value, initiator=principal, tenant=tenant, signer=loaded.signer,
                             source=loaded.source)
        except DefinitionRefused as exc:
            raise Refused(f"[{exc.reason}] {exc}") from None

    return start


def register(group: click.Group) -> None:
    group.add_command(mcp)
