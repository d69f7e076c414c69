"""`sealflow store migrate`: bring a store's schema up to date (numbered, transactional, idempotent).

A SQLite store migrates itself when opened; a PostgreSQL store is migrated only when asked (this
command, or ``?migrate=1`` in its URL), so that one operator decides when a shared schema changes.
A store whose schema is newer than this release refuses to open and says so.
"""

from __future__ import annotations

import json

import click

from sealflow.cli.exits import fail_usage
from sealflow.cli.options import json_flag, store_option


@click.group()
def store():
    """The state store itself: schema migrations."""


@store.command()
@store_option
@json_flag(None)
def migrate(store_url, as_json):
    """Apply the store's missing schema migrations; running it again changes nothing."""
    from sealflow.interpreter.store import StoreError, migrate_store

    try:
        version, applied = migrate_store(store_url)
    except StoreError as exc:
        fail_usage(str(exc))
    if as_json:
        click.echo(json.dumps({"version": version, "applied": applied}))
    elif applied:
        click.echo(f"migrated to schema version {version} (applied {', '.join(map(str, applied))})")
    else:
        click.echo(f"schema version {version}: up to date, nothing to apply")


def register(group: click.Group) -> None:
    group.add_command(store)
