"""``sealflow tokens create|list|revoke``: API tokens of the HTTP API (``sealflow serve``).

A token acts as one principal in one tenant; its secret is printed once, at creation, and the store keeps
only its hash. Listing shows ids, principals, tenants and expiry, never secrets. Revoking takes effect at
the token's next request. Creating and revoking are audited.

Under an access policy (``--access``, ``$SEALFLOW_ACCESS``, ``access:`` in ``sealflow.yaml``) its operators
(top-level ``operators``) may create, list and revoke anyone's tokens; any other principal only its own: a token
for itself (``--principal`` the same as ``--as``) in a tenant where it holds a role, the list of its own tokens,
and revoking one of them. Without a policy (open development mode) anyone may do anything.
"""

from __future__ import annotations

import dataclasses
import json
import time

import click

from sealflow.cli.exits import fail_usage, refuse
from sealflow.cli.options import (
    access_option,
    check_principal,
    default_principal,
    json_flag,
    store_option,
    tenant_option,
)
from sealflow.cli.session import load_access, open_store, server_of


def _when(ts: float | None) -> str:
    return "never" if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _check_expires(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    from sealflow.server.tokens import parse_duration

    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


#: who creates or revokes a token (audited); ``--principal`` is who the token acts as
actor_option = click.option("--as", "actor", metavar="PRINCIPAL", default=default_principal, callback=check_principal,
                            help="Who you are (audited; default: user:$SEALFLOW_USER, else the local user).")


def _may(access_path: str | None, actor: str, what: str, *, own: bool, tenant: str | None = None) -> bool:
    """Refuse (exit 1) unless ``actor`` may ``what``: an operator (or open mode: True, anyone's tokens), or
    ``own`` (the tokens are ``actor``'s; for a new one, ``actor`` holds a role in ``tenant``): False, its own."""
    from sealflow.policy.access import is_open
    from sealflow.policy.operations import is_operator

    access = load_access(access_path, quiet=True)
    if is_open(access) or is_operator(access, actor):
        return True
    if own and (tenant is None or access.roles(tenant, actor) or access.permissions(tenant, actor)):
        return False
    why = f"it holds no role in tenant {tenant!r}" if own else \
        "only an operator of the access policy (its top-level `operators`) may, for another principal"
    refuse(f"{actor} may not {what}: {why}", hint="create a token for yourself (--principal the same as --as) in a "
                                                  "tenant where you hold a role, or ask an operator")


@click.group()
def tokens() -> None:
    """API tokens for `sealflow serve`: create (the secret is shown once), list, revoke."""


@tokens.command("create")
@click.option("--principal", required=True, callback=check_principal, metavar="PRINCIPAL",
              help="Who the token acts as: user:NAME or service:NAME.")
@tenant_option
@click.option("--expires", callback=_check_expires, metavar="DURATION",
              help="Lifetime, like 90d, 12h or 30m (default: until revoked).")
@click.option("--label", metavar="TEXT", help="What the token is for (shown by `tokens list`).")
@store_option
@actor_option
@access_option
@json_flag()
def create(principal: str, tenant: str, expires: float | None, label: str | None, store_url: str | None, actor: str,
           access_path: str | None, as_json: bool) -> None:
    """Create a token acting as PRINCIPAL in TENANT; print it once (it cannot be shown again). Operators only
    under an access policy."""
    from sealflow.server.tokens import create as mint

    _may(access_path, actor, f"create an API token for {principal} in tenant {tenant!r}", own=principal == actor,
         tenant=tenant)
    store = open_store(store_url)
    try:
        text, record = mint(server_of(store), principal, tenant, time.time(), actor=actor, expires_in=expires,
                            label=label)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps({"token": text, "id": record.id, "principal": principal, "tenant": tenant,
                               "expires_at": record.expires_at}))
        return
    click.echo(text)
    click.echo(f"token {record.id}: {principal} in {tenant}, expires {_when(record.expires_at)}; this is the only "
               "time its secret is shown", err=True)


@tokens.command("list")
@click.option("--tenant", metavar="NAME", default=None, help="Only this tenant's tokens (default: all).")
@store_option
@actor_option
@access_option
@json_flag("Print a JSON list.")
def list_(tenant: str | None, store_url: str | None, actor: str, access_path: str | None, as_json: bool) -> None:
    """Every token: id, principal, tenant, created, expires, revoked (never the secret). Operators only under
    an access policy."""
    everyone = _may(access_path, actor, "list the API tokens", own=True)
    store = open_store(store_url)
    try:
        records = server_of(store).api_tokens(tenant)
    finally:
        store.close()
    if not everyone:  # a principal that is no operator sees its own tokens
        records = [r for r in records if r.principal == actor]
    rows = [{k: v for k, v in dataclasses.asdict(r).items() if k != "secret_hash"} for r in records]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no API tokens in this store; create one with `sealflow tokens create --principal user:NAME`")
    now = time.time()
    for r in records:
        state = "revoked" if r.revoked_at is not None else ("expired" if not r.usable(now) else "active")
        click.echo(f"{r.id}  {r.principal:<24} {r.tenant:<12} {state:<8} expires {_when(r.expires_at)}"
                   + (f"  {r.label}" if r.label else ""))


@tokens.command("revoke")
@click.argument("token_id", metavar="ID")
@store_option
@actor_option
@access_option
def revoke(token_id: str, store_url: str | None, actor: str, access_path: str | None) -> None:
    """Revoke token ID: its next request is refused. Operators only under an access policy."""
    from sealflow.store import InvalidOperation

    everyone = _may(access_path, actor, "revoke API tokens", own=True)
    store = open_store(store_url)
    try:
        server = server_of(store)
        if not everyone and not any(r.id == token_id and r.principal == actor for r in server.api_tokens(None)):
            refuse(f"{actor} may not revoke API token {token_id!r}: it is not one of its own (an operator of the "
                   "access policy may revoke anyone's)", hint="`sealflow tokens list` shows your tokens")
        record = server.revoke_api_token(token_id, time.time(), actor=actor)
    except InvalidOperation as exc:
        fail_usage(str(exc))
    finally:
        store.close()
    click.echo(f"token {record.id} ({record.principal} in {record.tenant}) revoked at {_when(record.revoked_at)}")


def register(group: click.Group) -> None:
    group.add_command(tokens)
