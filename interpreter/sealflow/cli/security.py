"""Who acts, in which tenant, under which access policy: the options every run command takes,
and ``sealflow approvals list``.

``--as PRINCIPAL`` (``$SEALFLOW_USER`` names the local user), ``--tenant NAME``
(``$SEALFLOW_TENANT``, default ``default``) and ``--access FILE``
(``$SEALFLOW_ACCESS``). Without an access policy the embedded default runs in
open development mode and says so on stderr at every command; commands that
serve others (``submit`` to a shared store; ``worker`` and ``serve`` when they
exist: call :func:`require_policy`) refuse to start without one.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

import click

from sealflow.cli.output import fail_usage

_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def _check_principal(ctx, param, value):
    from sealflow.interpreter.policy.access import InvalidPrincipal, check_principal

    if value is None:
        return value
    try:
        return check_principal(value)
    except InvalidPrincipal as exc:
        raise click.BadParameter(str(exc)) from None


def _check_tenant(ctx, param, value):
    if value is not None and not _TENANT.match(value):
        raise click.BadParameter(f"{value!r} is not a tenant name: letters, digits, '.', '_' or '-', like acme")
    return value


#: validates ``--as`` (attach with ``callback=`` where the option is declared)
check_principal_option = _check_principal

tenant_option = click.option(
    "--tenant", "tenant", metavar="NAME", envvar="SEALFLOW_TENANT", default="default", show_default=True,
    callback=_check_tenant, help="The tenant you act in ($SEALFLOW_TENANT). Runs of other tenants look unknown.")
access_option = click.option(
    "--access", "access_path", metavar="FILE", envvar="SEALFLOW_ACCESS",
    help="Access policy file ($SEALFLOW_ACCESS). None: open development mode (everyone may do everything).")


def load_access(path: str | None, *, quiet: bool = False):
    """The access provider for ``path`` (None: ``$SEALFLOW_ACCESS``, else open development mode, announced
    on stderr); an unreadable or invalid policy prints its located diagnostics and exits 2."""
    from sealflow.interpreter.policy.access import AccessPolicyError, access_provider, is_open

    path = path if path is not None else os.environ.get("SEALFLOW_ACCESS") or None
    try:
        provider = access_provider(path)
    except AccessPolicyError as exc:
        for d in exc.diagnostics:
            click.echo(d.format(), err=True)
        fail_usage(exc.message if not exc.diagnostics else f"access policy {path} is invalid (see above)")
    if is_open(provider) and not quiet:
        click.echo("sealflow: warning: OPEN DEVELOPMENT MODE: no access policy (--access FILE or SEALFLOW_ACCESS), "
                   "so every principal holds every permission and role; runs record access: open-development",
                   err=True)
    return provider


def is_shared_store(url: str | None) -> bool:
    """Whether the store URL names a store others share (anything but a local SQLite file)."""
    url = url or os.environ.get("SEALFLOW_STORE")
    return bool(url) and not url.startswith("sqlite:///")


def require_policy(provider, what: str) -> None:
    """Exit 1 when ``what`` (a worker, a server, a submit to a shared store) would start in open mode.
    The hook for ``sealflow worker`` and ``sealflow serve``: call it before starting."""
    from sealflow.interpreter.policy.authz import PolicyRequired
    from sealflow.interpreter.policy.authz import require_policy as check

    try:
        check(provider, what)
    except PolicyRequired as exc:
        click.echo(f"sealflow: refused: {exc.message}", err=True)
        sys.exit(1)


# ---------------------------------------------------------------- approvals list

@click.group()
def approvals():
    """Approvals waiting for you."""


@approvals.command("list")
@click.option("--as", "principal", metavar="PRINCIPAL", default=None, callback=_check_principal,
              help="Whose list: user:NAME or service:NAME (default: the local user).")
@tenant_option
@access_option
@click.option("--store", "store_url", metavar="URL", envvar="SEALFLOW_STORE", help="State store (sqlite:///PATH).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def approvals_list(principal, tenant, access_path, store_url, as_json):
    """List the approval gates of the tenant that you may decide now: you are an approver (by name or
    by a role you hold), the run is not yours (separation of duties), you have not approved it yet."""
    from sealflow.cli.runs import default_principal, open_runtime

    principal = principal or _check_principal(None, None, default_principal())
    with open_runtime(store_url, access=access_path) as rt:
        waiting = rt.approvals_waiting(principal, tenant)
    if as_json:
        click.echo(json.dumps(waiting, indent=2, ensure_ascii=False, default=str))
        return
    if not waiting:
        click.echo(f"nothing waits for {principal} in tenant {tenant}")
        return
    for w in waiting:
        due = "" if w["due_at"] is None else f"  due in {max(w['due_at'] - time.time(), 0) / 3600:.1f}h"
        click.echo(f"{w['run_id']}  {w['workflow']} v{w['version']}  at {w['step']}  as {w['as']}  "
                   f"approvals {w['approvals']}/{w['quorum']}  started by {w['initiator']}{due}")
        click.echo(f"    show {w['show_hash'][:23]}...: {json.dumps(w['show'], ensure_ascii=False, default=str)}")
        click.echo(f"    sealflow approve {w['run_id']} --tenant {tenant}  |  sealflow reject {w['run_id']} "
                   f"--tenant {tenant} --reason TEXT")


def register(group: click.Group) -> None:
    group.add_command(approvals)
