"""``sealflow audit``: a run's audit trail, and the check of the hash chains.

``audit`` is a group whose default is the run's trail::

    sealflow audit RUN                     # a run's audit trail, oldest first (``audit show RUN``)
    sealflow audit verify [--tenant T]     # walk the hash chains you may read; exit 1 naming the first bad event
"""

from __future__ import annotations

import json
import os
import sys

import click

from sealflow.cli import render
from sealflow.cli.exits import fail_usage, refuse
from sealflow.cli.options import access_option, any_tenant_option, as_option, json_option, on_a_store, store_option
from sealflow.cli.session import load_access, no_run, open_runtime, open_store


class _AuditGroup(click.Group):
    """``audit RUN`` is ``audit show RUN``; ``audit verify`` is the chain check."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["show", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_AuditGroup)
def audit():
    """The audit trail: `audit RUN` prints a run's events; `audit verify` checks the hash chains."""


@audit.command("show")
@click.argument("run_id", metavar="RUN")
@on_a_store()
def show(run_id, store_url, principal, tenant, access_path, as_json):
    """Print a run's audit trail, oldest first (needs audit:read in the run's tenant)."""
    from sealflow.interpreter.store import NotFound

    with open_runtime(store_url, access=access_path) as rt:
        try:
            events = rt.audit(run_id, tenant=tenant, actor=principal)
        except NotFound:  # unknown, or not the caller's to read: one answer
            no_run(run_id)
        render.print_audit(events, as_json)


def _verify_readable(store, access, principal: str, tenant: str | None):
    """The chain report over the chains ``principal`` may read (operators and open mode: all)."""
    from sealflow.interpreter.policy.operations import readable_chains
    from sealflow.interpreter.store.auditchain import ChainReport
    from sealflow.interpreter.store.auditchain import verify as verify_chain

    chains = readable_chains(store, access, principal, tenant)
    if chains is None:
        return verify_chain(store, tenant)
    report = ChainReport()
    for name in chains:
        part = verify_chain(store, name)
        report.events.update(part.events)
        report.heads.update(part.heads)
        report.breaks.extend(part.breaks)
    return report


@audit.command("verify")
@store_option
@as_option
@any_tenant_option
@access_option
@json_option
def verify(store_url, principal, tenant, access_path, as_json):
    """Verify the audit chains you may read (audit:read in their tenant; an operator: all): exit 0 when
    intact, 1 naming the first edited, deleted, inserted or reordered event."""
    from sealflow.interpreter.policy.operations import may_see_tenant

    provider = load_access(access_path)
    if tenant is not None and not may_see_tenant(provider, tenant, principal, "audit:read"):
        refuse(f"{principal} may not read the audit chain of tenant {tenant!r} (it needs audit:read there, or "
               "to be an operator of the access policy)")
    url = store_url or os.environ.get("SEALFLOW_STORE")
    if url is None and not os.path.exists(".sealflow/state.db"):
        fail_usage("no state store here (.sealflow/state.db); pass --store sqlite:///PATH")
    store = open_store(url)
    try:
        report = _verify_readable(store, provider, principal, tenant)
    finally:
        store.close()
    first = report.first
    if as_json:
        click.echo(json.dumps({"ok": report.ok, "events": report.events, "heads": report.heads,
                               "first_break": None if first is None else {
                                   "tenant": first.tenant, "event_id": first.event_id, "seq": first.seq,
                                   "problem": first.problem, "message": first.message},
                               "breaks": len(report.breaks)}, indent=2))
    else:
        for name in sorted(report.events):
            broken = next((b for b in report.breaks if (b.tenant or "(no tenant)") == name), None)
            mark = "BROKEN" if broken else "ok"
            click.echo(f"{mark:<7} tenant {name or '(system)'}: {report.events[name]} events, head "
                       f"{(report.heads[name] or '-')[:16]}")
        if first is not None:
            click.echo(f"sealflow: audit chain broken: tenant {first.tenant or '(system)'}: {first.message}",
                       err=True)
        elif not report.events:
            click.echo("no audit events")
    sys.exit(0 if report.ok else 1)


def register(group: click.Group) -> None:
    group.add_command(audit)
