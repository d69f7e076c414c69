"""``sealflow dlq list|show|redrive``: the dead-letter list, runs that failed for good, and redrives."""

from __future__ import annotations

import click

from sealflow.cli import render
from sealflow.cli.completion import run_ids
from sealflow.cli.exits import fail_usage
from sealflow.cli.options import on_a_store
from sealflow.cli.session import act_then_drive, no_run, open_runtime


@click.group()
def dlq() -> None:
    """The dead-letter list: runs that failed for good, and redrives."""


@dlq.command("list")
@on_a_store()
def dlq_list(store_url: str | None, principal: str, tenant: str, access_path: str | None, as_json: bool) -> None:
    """List the tenant's dead-lettered runs that you may read (dlq:read)."""
    with open_runtime(store_url, access=access_path) as rt:
        render.print_dead_letters(rt.dlq_list(tenant=tenant, actor=principal), as_json)


@dlq.command("show")
@click.argument("run_id", metavar="RUN", shell_complete=run_ids)
@on_a_store()
def dlq_show(run_id: str, store_url: str | None, principal: str, tenant: str, access_path: str | None,
             as_json: bool) -> None:
    """Show a dead-lettered run: why, its failed attempts, recent audit events (--json: all of it, as JSON)."""
    from sealflow.store import InvalidOperation, NotFound

    with open_runtime(store_url, access=access_path) as rt:
        try:
            detail = rt.dlq_show(run_id, tenant=tenant, actor=principal)
        except NotFound:
            no_run(run_id)
        except InvalidOperation as exc:
            fail_usage(str(exc))
        render.print_dead_letter(detail, as_json)


@dlq.command("redrive")
@click.argument("run_id", metavar="RUN", shell_complete=run_ids)
@on_a_store(actions=True)
def dlq_redrive(run_id: str, actions: tuple[str, ...], store_url: str | None, principal: str, tenant: str,
                access_path: str | None, as_json: bool) -> None:
    """Rerun a dead-lettered run from its failed step, on its original plan."""
    with open_runtime(store_url, actions, access=access_path) as rt:
        act_then_drive(rt, run_id, principal, tenant, as_json,
                       lambda rt: rt.dlq_redrive(run_id, actor=principal, tenant=tenant))


def register(group: click.Group) -> None:
    group.add_command(dlq)
