"""``sealflow breakers list|reset``: the circuit breakers shared by every run of a store."""

from __future__ import annotations

import json
import time

import click

from sealflow.cli.exits import fail_usage, refuse
from sealflow.cli.options import on_a_store
from sealflow.cli.session import load_access, load_config, open_store, store_location

_HINT = "ask an operator of the access policy (its top-level `operators`) to do it"


@click.group()
def breakers() -> None:
    """Circuit breakers: closed, open (calls fail at once with circuit_open) or half-open (one probe)."""


@breakers.command("list")
@on_a_store()
def breakers_list(store_url: str | None, principal: str, tenant: str, access_path: str | None, as_json: bool) -> None:
    """List every breaker with its state, failures and settings (operators only under an access policy)."""
    from sealflow.policy.operations import OperatorOnly, require_operator
    from sealflow.runtime.breakers import listing

    try:
        require_operator(load_access(access_path), principal, "list the circuit breakers")
    except OperatorOnly as exc:
        refuse(exc, hint=_HINT)
    store = open_store(store_location(store_url))
    try:
        rows = listing(store, time.time(), load_config().extra)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps({"breakers": rows}, indent=2, ensure_ascii=False))
        return
    if not rows:
        click.echo("no circuit breakers have recorded anything in this store")
        return
    for r in rows:
        probe = f", probe in {r['probe_in_s']:.1f}s" if r["probe_in_s"] is not None else ""
        click.echo(f"{r['name']}: {r['state']} ({r['failures']}/{r['threshold']} failures within "
                   f"{r['window_s']:g}s, cool-down {r['cool_down_s']:g}s{probe})"
                   + (f"; last error: {r['last_error']}" if r["last_error"] else ""))


@breakers.command("reset")
@click.argument("name")
@on_a_store()
def breakers_reset(name: str, store_url: str | None, principal: str, tenant: str, access_path: str | None,
                   as_json: bool) -> None:
    """Close breaker NAME and forget its failures (audited as circuit_reset; operators only under an access
    policy, since a breaker guards every tenant's calls)."""
    from sealflow.policy.operations import OperatorOnly
    from sealflow.runtime.breakers import reset

    access = load_access(access_path)
    store = open_store(store_location(store_url))
    try:
        known = [r.name for r in store.breakers()]
        try:
            done = reset(store, name, time.time(), actor=principal, access=access, tenant=tenant)
        except OperatorOnly as exc:
            refuse(exc, hint=_HINT)
        if not done:
            fail_usage(f"no circuit breaker named {name!r} in this store; known: {', '.join(known) or '(none)'}")
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps({"breaker": name, "state": "closed"}))
    else:
        click.echo(f"{name}: closed (reset by {principal})")


def register(group: click.Group) -> None:
    group.add_command(breakers)
