"""Runtime controls on the command line: the runtime configuration (``--config``) and the audit chain.

``sealflow --config FILE <command>`` (or ``$SEALFLOW_CONFIG``) loads the
runtime configuration (tenant limits, temporary storage, secrets; see
:mod:`sealflow.interpreter.service.config`) for any command that opens a runtime.

``sealflow audit`` is a group whose default is the run's trail::

    sealflow audit RUN                     # a run's audit trail, oldest first (``audit show RUN``)
    sealflow audit verify [--tenant T]     # walk the hash chains; exit 1 naming the first bad event
"""

from __future__ import annotations

import json
import os
import sys

import click

from sealflow.cli.output import fail_usage

#: audit record fields the text view of ``audit RUN`` leaves out (``--json`` has them)
CHAIN_BOOKKEEPING = ("tenant", "workflow", "workflow_version", "plan_digest", "seq", "prev_hash", "hash")


def config_option(fn):
    """The root group's ``--config FILE`` (``$SEALFLOW_CONFIG``), kept in the click context."""

    def remember(ctx, param, value):
        if value is not None:
            ctx.ensure_object(dict)["config_path"] = value
            load_config(value)  # a bad file is a usage error now, before any command runs
        return value

    return click.option("--config", "config_path", metavar="FILE", envvar="SEALFLOW_CONFIG", expose_value=False,
                        is_eager=True, callback=remember,
                        help="Runtime configuration: tenant limits, temporary storage, secrets ($SEALFLOW_CONFIG).")(fn)


def load_config(path: str | None = None):
    """The runtime configuration of this command (``--config``, else ``$SEALFLOW_CONFIG``, else defaults)."""
    from sealflow.interpreter.service.config import ConfigError, RuntimeConfig

    if path is None:
        ctx = click.get_current_context(silent=True)
        obj = ctx.find_root().obj if ctx is not None else None
        path = (obj or {}).get("config_path") if isinstance(obj, dict) else None
    try:
        return RuntimeConfig.from_env(path)
    except ConfigError as exc:
        fail_usage(str(exc))


class _AuditGroup(click.Group):
    """``audit RUN`` is ``audit show RUN``; ``audit verify`` is the chain check."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["show", *args]
        return super().parse_args(ctx, args)


def audit_group(show: click.Command) -> click.Group:
    """The ``audit`` group: ``show`` (the run's trail, also ``audit RUN``) and ``verify``."""
    group = _AuditGroup("audit", help="The audit trail: `audit RUN` prints a run's events; `audit verify` checks "
                                      "the hash chains.")
    show.name = "show"
    group.add_command(show)
    group.add_command(verify)
    return group


@click.command()
@click.option("--store", "store_url", metavar="URL", envvar="SEALFLOW_STORE",
              help="State store (sqlite:///PATH). Default: $SEALFLOW_STORE or sqlite:///.sealflow/state.db")
@click.option("--tenant", metavar="NAME", default=None, help="Verify only this tenant's chain (default: every tenant).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def verify(store_url, tenant, as_json):
    """Verify the audit chains: exit 0 when intact, 1 naming the first edited, deleted, inserted or
    reordered event."""
    from sealflow.interpreter.store.auditchain import verify as verify_chain
    from sealflow.interpreter.store import StoreError, open_store

    url = store_url or os.environ.get("SEALFLOW_STORE")
    if url is None and not os.path.exists(".sealflow/state.db"):
        fail_usage("no state store here (.sealflow/state.db); pass --store sqlite:///PATH")
    try:
        store = open_store(url)
    except StoreError as exc:
        fail_usage(str(exc))
    try:
        report = verify_chain(store, tenant)
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
