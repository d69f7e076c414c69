"""`sealflow store migrate|prune`: the store's schema and its retention.

``migrate`` brings a store's schema up to date (numbered, transactional, idempotent). A SQLite store
migrates itself when opened; a PostgreSQL store is migrated only when asked (this command, or
``?migrate=1`` in its URL), so that one operator decides when a shared schema changes. A store whose
schema is newer than this release refuses to open and says so.

``prune --older-than 30d`` deletes finished runs last changed before the cutoff (with their attempts,
results, timers, ledger entries) and appends a ``store.pruned`` checkpoint event carrying the sha256 of
what went to each tenant's audit chain; the audit log itself is kept, so ``audit verify`` stays green
(:mod:`sealflow.store.prune`). Workers do the same with ``retention:`` in the config.
"""

from __future__ import annotations

import json
import time

import click

from sealflow.cli.exits import fail_usage, refuse
from sealflow.cli.options import access_option, as_option, json_flag, store_option
from sealflow.operations.retention import Prunable


@click.group()
def store() -> None:
    """The state store itself: schema migrations, retention."""


@store.command()
@store_option
@json_flag(None)
def migrate(store_url: str | None, as_json: bool) -> None:
    """Apply the store's missing schema migrations; running it again changes nothing."""
    from sealflow.store import StoreError, migrate_store

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


def _older_than(ctx: click.Context, param: click.Parameter, value: str) -> float:
    from sealflow.dsl.durations import DurationError, parse_ms

    try:
        ms = parse_ms(value)
    except DurationError as exc:
        raise click.BadParameter(str(exc)) from None
    if ms <= 0:
        raise click.BadParameter(f"{value!r}: the age must be more than zero, like 30d")
    if ms > _MOST_MS:
        raise click.BadParameter(f"{value!r}: the age must be at most 36500d (a cutoff before 1970 prunes nothing)")
    return ms / 1000


#: the oldest age --older-than takes: 100 years (more would put the cutoff before the epoch)
_MOST_MS = 36_500 * 86_400_000


@store.command()
@store_option
@click.option("--older-than", "older_than", required=True, metavar="AGE", callback=_older_than,
              help="Delete finished runs last changed longer ago than this: 30d, 12h, 90m.")
@click.option("--include-dead-letters", is_flag=True,
              help="Also delete runs still in the dead-letter queue (kept by default: they may be redriven).")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; change nothing.")
@as_option
@access_option
@json_flag(None)
def prune(store_url: str | None, older_than: float, include_dead_letters: bool, dry_run: bool, principal: str,
          access_path: str | None, as_json: bool) -> None:
    """Delete finished runs older than --older-than; the audit chain keeps a checkpoint of what went
    (operators only under an access policy: it deletes every tenant's runs)."""
    from sealflow.cli.session import load_access, open_store, store_location
    from sealflow.policy.operations import OperatorOnly, require_operator

    try:
        require_operator(load_access(access_path, quiet=dry_run), principal, "prune the store's finished runs")
    except OperatorOnly as exc:
        refuse(exc, hint="run it as an operator of the access policy (its top-level `operators`), e.g. --as "
                         "the service principal your scheduled job uses")
    now = time.time()
    st = open_store(store_location(store_url))
    try:
        if not isinstance(st, Prunable):
            refuse(f"this store ({type(st).__name__}) cannot prune runs")
        report = st.prune_runs(now - older_than, now, actor=principal,
                               include_dead_letters=include_dead_letters, dry_run=dry_run)
    finally:
        st.close()
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, "before": report.before, "runs": report.runs,
                               "total": report.total, "checkpoints": report.hashes,
                               "kept_dead_letters": report.kept_dead_letters}))
        return
    verb = "would delete" if dry_run else "deleted"
    click.echo(f"{verb} {report.total} finished run{'s' if report.total != 1 else ''} older than "
               f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(report.before))} UTC")
    for tenant, n in sorted(report.runs.items()):
        hashes = report.hashes.get(tenant, [])
        click.echo(f"  tenant {tenant or '(system)'}: {n}" + (f", checkpoint {hashes[-1][:23]}" if hashes else ""))
    if report.kept_dead_letters:
        click.echo(f"kept {report.kept_dead_letters} run(s) still in the dead-letter queue "
                   "(--include-dead-letters deletes them too)")


def register(group: click.Group) -> None:
    group.add_command(store)
