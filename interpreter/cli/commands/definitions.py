"""`sealflow definitions list|show`: the store's registry of loaded definitions (versions, digests,
signers, which is active, pins). See :mod:`sealflow.store.definitions`."""

from __future__ import annotations

import dataclasses
import json
import time

import click

from sealflow.cli.exits import fail_usage, refuse
from sealflow.cli.options import access_option, as_option, json_flag, store_option
from sealflow.cli.session import load_access, open_store


def _operators_only(principal: str, access_path: str | None) -> None:
    """The registry is shared by every tenant of the store (names, versions, signers, pins): under an access
    policy only its operators read it; open development mode reads it as before."""
    from sealflow.policy.operations import OperatorOnly, require_operator

    try:
        require_operator(load_access(access_path), principal, "read the definition registry")
    except OperatorOnly as exc:
        refuse(exc, hint="ask an operator, or list your own runs with `sealflow status RUN`")


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


@click.group()
def definitions() -> None:
    """The definitions a store has loaded: versions, digests, signers, the active one, pins."""


@definitions.command("list")
@store_option
@as_option
@access_option
@json_flag(None)
def list_(store_url: str | None, principal: str, access_path: str | None, as_json: bool) -> None:
    """Every (name, version) loaded for a run, with its digest and signer (under a policy: operators only)."""
    _operators_only(principal, access_path)
    store = open_store(store_url)
    try:
        records = store.definitions()
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(r) for r in records], indent=2))
        return
    if not records:
        click.echo("no signed definition has been loaded on this store (unsigned runs are not recorded here)")
    for r in records:
        flags = " ".join(f for f, on in (("active", r.active), ("pinned", r.pinned), ("REFUSED", r.refused)) if on)
        click.echo(f"{r.name:<28} v{r.version:<4} {r.digest[:23]}...  {r.signer[:24]:<24} {flags}")


@definitions.command("show")
@click.argument("name")
@store_option
@as_option
@access_option
@json_flag(None)
def show(name: str, store_url: str | None, principal: str, access_path: str | None, as_json: bool) -> None:
    """The versions of one definition: digests, signers, first and last load, pins (under a policy: operators
    only)."""
    _operators_only(principal, access_path)
    store = open_store(store_url)
    try:
        records = store.definitions(name)
    finally:
        store.close()
    if not records:
        fail_usage(f"no definition named {name!r} has been loaded on this store")
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(r) for r in records], indent=2))
        return
    for r in records:
        flags = ", ".join(f for f, on in (("active", r.active), ("pinned by an operator", r.pinned)) if on)
        click.echo(f"{r.name} v{r.version}{'  (' + flags + ')' if flags else ''}\n  digest {r.digest}\n"
                   f"  signer {r.signer}\n  first loaded {_when(r.first_seen)}, last {_when(r.last_seen)}, "
                   f"{r.loads} load(s)" + (f"\n  refused by an executor: {r.refused}" if r.refused else ""))


def register(group: click.Group) -> None:
    group.add_command(definitions)
