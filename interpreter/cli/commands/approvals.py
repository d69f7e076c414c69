"""``sealflow approvals list``: the approval gates waiting for you."""

from __future__ import annotations

import click

from sealflow.cli import render
from sealflow.cli.options import (
    access_option,
    check_principal,
    default_principal,
    json_flag,
    store_option,
    tenant_option,
)
from sealflow.cli.session import open_runtime


@click.group()
def approvals() -> None:
    """Approvals waiting for you."""


@approvals.command("list")
@click.option("--as", "principal", metavar="PRINCIPAL", default=None, callback=check_principal,
              help="Whose list: user:NAME or service:NAME (default: the local user).")
@tenant_option
@access_option
@store_option
@json_flag("Print a JSON list.")
def approvals_list(principal: str | None, tenant: str, access_path: str | None, store_url: str | None,
                   as_json: bool) -> None:
    """List the approval gates of the tenant that you may decide now: you are an approver (by name or
    by a role you hold), the run is not yours (separation of duties), you have not approved it yet."""
    principal = principal or check_principal(None, None, default_principal())
    with open_runtime(store_url, access=access_path) as rt:
        waiting = rt.approvals_waiting(principal, tenant)
        withheld = [] if as_json else rt.approvals_withheld(principal, tenant)
    render.print_approvals(waiting, principal, tenant, as_json)
    for w in withheld:  # why the initiator's own gates are not listed, and whom to ask
        ask = f"; ask {', '.join(w['others'])}" if w["others"] else ""
        click.echo(f"{w['run_id']}  {w['workflow']} v{w['version']}  at {w['step']}: not yours to decide, you started "
                   f"it (separation of duties: nobody approves their own run){ask}")


def register(group: click.Group) -> None:
    group.add_command(approvals)
