"""The options commands share, each defined once, and the stacks they come in.

``--config FILE`` (``$SEALFLOW_CONFIG``) belongs to the root group. A command that acts on a run store
takes :func:`on_a_store`: ``[--actions] --store --as --tenant --access [its own...] --json``.
``--trust/--bundle/--pin-version`` (:func:`trust_options`) load only what a trusted signer signed.
Option callbacks validate at parse time, so a bad value is a usage error (exit 2) before anything runs.
"""

from __future__ import annotations

import getpass
import os
import re
from collections.abc import Callable
from typing import Any, overload

import click

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def stack(*options: Decorator) -> Decorator:
    """Apply ``options`` as if written one above the other (the first is listed first in --help)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


# ---------------------------------------------------------------- the root group

def config_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The root group's ``--config FILE`` (``$SEALFLOW_CONFIG``), kept in the click context."""

    def remember(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is not None:
            from sealflow.cli.session import load_config

            ctx.ensure_object(dict)["config_path"] = value
            load_config(value)  # a bad file is a usage error now, before any command runs
        return value

    return click.option("--config", "config_path", metavar="FILE", envvar="SEALFLOW_CONFIG", expose_value=False,
                        is_eager=True, callback=remember,
                        help="Runtime configuration: tenant limits, temporary storage, secrets ($SEALFLOW_CONFIG).")(fn)


def project_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The root group's ``--project FILE`` (``$SEALFLOW_PROJECT``; default: ``sealflow.yaml`` here or above)."""

    def remember(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is not None:
            from sealflow.cli.session import project

            ctx.ensure_object(dict)["project_path"] = value
            project()  # a broken file is a usage error now, before any command runs
        return value

    return click.option("--project", "project_path", metavar="FILE", envvar="SEALFLOW_PROJECT", expose_value=False,
                        is_eager=True, callback=remember,
                        help="The project file (default: sealflow.yaml in this folder or the nearest above; "
                             "$SEALFLOW_PROJECT).")(fn)


# ---------------------------------------------------------------- single options

actions_option = click.option(
    "--actions", "actions", multiple=True, metavar="MODULE_OR_FILE",
    help="Import action modules (dotted name or .py file) to check actions' permissions and effects. Repeatable.",
)

store_option = click.option("--store", "store_url", metavar="URL", envvar="SEALFLOW_STORE",
                            help="State store (sqlite:///PATH). Default: $SEALFLOW_STORE or sqlite:///.sealflow/state.db")


def json_flag(help: str | None = "Print one JSON object.") -> Decorator:
    """``--json``: print JSON for machines instead of text."""
    return click.option("--json", "as_json", is_flag=True, help=help)


json_option = json_flag()

#: ``--metrics-port`` and ``--metrics-addr`` of a long-running process (a worker, a notification deliverer)
metrics_options = stack(
    click.option("--metrics-port", type=click.IntRange(1, 65535), default=None, metavar="PORT",
                 envvar="SEALFLOW_METRICS_PORT",
                 help="Serve Prometheus metrics on http://--metrics-addr:PORT/metrics ($SEALFLOW_METRICS_PORT; "
                      "docs/operations.md)."),
    click.option("--metrics-addr", default="127.0.0.1", show_default=True, metavar="ADDR",
                 help="The address --metrics-port listens on (0.0.0.0 for a scraper on another host)."),
)


@overload
def check_principal(ctx: click.Context | None, param: click.Parameter | None, value: str) -> str: ...


@overload
def check_principal(ctx: click.Context | None, param: click.Parameter | None, value: None) -> None: ...


def check_principal(ctx: click.Context | None, param: click.Parameter | None, value: str | None) -> str | None:
    """Validate ``--as`` (user:NAME or service:NAME, a full match: no control character, no trailing newline);
    attach with ``callback=``."""
    from sealflow.policy.access import InvalidPrincipal
    from sealflow.policy.access import check_principal as check

    if value is None:
        return value
    try:
        return check(value)
    except InvalidPrincipal as exc:
        raise click.BadParameter(str(exc)) from None


def default_principal() -> str:
    """``user:$SEALFLOW_USER``, else the local login name, else ``user:local``."""
    try:
        return "user:" + (os.environ.get("SEALFLOW_USER") or getpass.getuser())
    except Exception:  # no login name in some containers
        return "user:local"


as_option = click.option("--as", "principal", metavar="PRINCIPAL", default=default_principal,
                         callback=check_principal,
                         help="Who acts: user:NAME or service:NAME (default: user:$SEALFLOW_USER, else the local "
                              "user).")


def _check_tenant(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Validate a tenant name with a full match (``re.match`` with ``$`` lets a trailing newline through)."""
    if value is not None and not _TENANT.fullmatch(value):
        raise click.BadParameter(f"{value!r} is not a tenant name: letters, digits, '.', '_' or '-', like acme")
    return value


tenant_option = click.option(
    "--tenant", "tenant", metavar="NAME", envvar="SEALFLOW_TENANT", default="default", show_default=True,
    callback=_check_tenant, help="The tenant you act in ($SEALFLOW_TENANT). Runs of other tenants look unknown.")

#: ``--tenant`` where leaving it out means every tenant (``audit verify``)
any_tenant_option = click.option("--tenant", metavar="NAME", default=None, callback=_check_tenant,
                                 help="Verify only this tenant's chain (default: every tenant you may read).")

access_option = click.option(
    "--access", "access_path", metavar="FILE", envvar="SEALFLOW_ACCESS",
    help="Access policy file ($SEALFLOW_ACCESS). None: open development mode (everyone may do everything).")

input_option = click.option("--input", "raw_input", metavar="JSON|@FILE",
                            help="The run's input, as JSON or @path/to/file.json.")
idempotency_option = click.option("--idempotency-key", metavar="KEY",
                                  help="Submitting again with the same key returns the same run.")


def parse_tags(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``--tag NAME=VALUE`` options as (name, value) pairs; a bad one is a usage error saying why."""
    from sealflow.store.tags import parse_tag

    try:
        return tuple(parse_tag(v) for v in values)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


tag_option = click.option("--tag", "tags", multiple=True, metavar="NAME=VALUE", callback=parse_tags,
                          help="Label the run, to find it by (runs list --tag, GET /v1/runs?tag=); repeatable.")


def trust_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--trust POLICY, --bundle PATH, --pin-version: load only what a trusted signer signed (docs/trust.md)."""
    return stack(
        click.option("--trust", metavar="POLICY", envvar="SEALFLOW_TRUST",
                     help="Trust policy: run the file only if its signature verifies (offline). Without it, "
                     "development mode: the run records 'unsigned'."),
        click.option("--bundle", metavar="PATH", help="The signature file (default: FILE.sigstore.json or "
                     "FILE.dsse.json beside it)."),
        click.option("--pin-version", is_flag=True,
                     help="Operator override: run this version although a newer one ran on this store (audited)."),
    )(fn)


# ---------------------------------------------------------------- stacks

def on_a_store(*own: Decorator, actions: bool = False) -> Decorator:
    """The stack of a command on a run store: ``[--actions] --store --as --tenant --access``, then the
    command's ``own`` options, then ``--json``. Its function takes ``actions`` (when asked), ``store_url``,
    ``principal``, ``tenant``, ``access_path``, the own options' names and ``as_json``."""
    return stack(*((actions_option,) if actions else ()), store_option, as_option, tenant_option, access_option,
                 *own, json_option)
