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

import click

from sealflow.cli.exits import fail, fail_usage
from sealflow.cli.session import load_config, project


@click.group()
def mcp() -> None:
    """The project's MCP servers: pin their tools (lock)."""


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


def register(group: click.Group) -> None:
    group.add_command(mcp)
