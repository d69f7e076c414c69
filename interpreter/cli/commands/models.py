"""`sealflow models list|check`: the models the runtime configuration names, and whether each answers.

The configuration is the runtime config file (``--config FILE`` before the command, or
``$SEALFLOW_CONFIG``); its ``models:`` section maps the logical names definitions use to providers
(docs/models.md). Neither command prints a secret value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from sealflow.cli.exits import fail_usage
from sealflow.cli.options import json_flag
from sealflow.cli.session import load_config

if TYPE_CHECKING:
    from sealflow.runtime.config import RuntimeConfig


def _section(config: RuntimeConfig) -> Mapping[str, Any] | None:
    return config.extra if "models" in config.extra else None


@click.group()
def models() -> None:
    """The models the runtime configuration names (its models: section; docs/models.md)."""


@models.command("list")
@json_flag(None)
def list_(as_json: bool) -> None:
    """Each logical model name, its provider, the provider's model id, price, rate limit and endpoint."""
    from sealflow.core.errors import ConfigError
    from sealflow.providers.loader import list_models, rate_limit_text

    config = load_config()
    try:
        rows = list_models(_section(config), source=config.source)
    except ConfigError as exc:
        fail_usage(str(exc))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if config.source is None or _section(config) is None:
        click.echo("no models: section in the runtime configuration (--config FILE or SEALFLOW_CONFIG); "
                   "only the local model serves")
    for r in rows:
        endpoint = f"  {r['endpoint']}" if r["endpoint"] else ""
        click.echo(f"{r['name']:<16} {r['provider']:<10} {r['model']:<28} {r['price']}  "
                   f"{rate_limit_text(r['rate_limit'])}{endpoint}")


@models.command("check")
@click.option("--no-probe", is_flag=True, help="Check secrets and prices only; send no request.")
@json_flag(None)
def check(no_probe: bool, as_json: bool) -> None:
    """Check each configured model: its API key resolves, its price is known, and (unless --no-probe) a
    one-token request is answered. Exit 1 when any model has a problem."""
    from sealflow.core.errors import ConfigError
    from sealflow.execution.secrets import chain_for
    from sealflow.providers.loader import check_models

    config = load_config()
    try:
        checks = check_models(_section(config), chain_for(config), source=config.source, probe=not no_probe)
    except ConfigError as exc:
        fail_usage(str(exc))
    if as_json:
        click.echo(json.dumps([{"name": c.name, "provider": c.provider, "ok": c.ok, "problems": c.problems,
                                "notes": c.notes} for c in checks], indent=2))
    else:
        if not checks:
            click.echo("no models configured: nothing to check (only the local model serves)")
        for c in checks:
            click.echo(f"{c.name:<16} {c.provider:<10} {'ok' if c.ok else 'FAILED'}")
            for p in c.problems:
                click.echo(f"  problem: {p}")
            for n in c.notes:
                click.echo(f"  note: {n}")
    if any(not c.ok for c in checks):
        raise SystemExit(1)


def register(group: click.Group) -> None:
    group.add_command(models)
