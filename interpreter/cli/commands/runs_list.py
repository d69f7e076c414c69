"""``sealflow runs list``: the tenant's runs, newest first, filtered (the same listing as ``GET /v1/runs``)."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from sealflow.cli.exits import refuse
from sealflow.cli.options import on_a_store, parse_tags
from sealflow.cli.session import load_access, open_store

STATES = ("queued", "running", "waiting", "cancelling", "compensating", "completed", "failed", "cancelled",
          "timed_out", "quarantined")


@click.group()
def runs() -> None:
    """Browse runs."""


@runs.command("list")
@on_a_store(click.option("--state", "states", multiple=True, type=click.Choice(STATES), help="Only runs in STATE "
                         "(repeatable)."),
            click.option("--workflow", metavar="NAME", help="Only runs of this workflow."),
            click.option("--initiator", metavar="PRINCIPAL", help="Only runs this principal submitted."),
            click.option("--tag", "tags", multiple=True, metavar="NAME=VALUE", callback=parse_tags,
                         help="Only runs submitted with this tag (repeatable: every one)."),
            click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 500)))
def list_(store_url: str | None, principal: str, tenant: str, access_path: str | None, states: tuple[str, ...],
          workflow: str | None, initiator: str | None, tags: tuple[tuple[str, str], ...], limit: int,
          as_json: bool) -> None:
    """The runs of the tenant, newest first (a principal who is not a member of it sees none)."""
    from sealflow.policy.authz import Unauthorized, member_permissions
    from sealflow.store.records import RunQuery

    try:
        _, member = member_permissions(load_access(access_path), tenant, principal)
    except Unauthorized as exc:
        refuse(f"unauthorized: {exc.message}")
    store = open_store(store_url)
    try:
        found = store.query_runs(RunQuery(tenant=tenant, workflow=workflow, states=tuple(states) or None,
                                          initiator=initiator, limit=limit, tags=tags)) if member else []
    finally:
        store.close()
    rows: list[dict[str, Any]] = [
        {"run_id": r.id, "workflow": r.workflow, "version": r.workflow_version, "state": r.state,
         "initiator": r.initiator, "created_at": r.created_at} for r in found]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"no runs in tenant {tenant} match")
    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r["created_at"]))
        click.echo(f"{r['run_id']}  {r['workflow']} v{r['version']:<3} {r['state']:<11} {r['initiator']:<20} {when}Z")


def register(group: click.Group) -> None:
    group.add_command(runs)
