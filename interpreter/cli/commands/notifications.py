"""``sealflow notifications list|deliver|retry``: the approval notifications of a store (docs/operations.md).

``list`` shows deliveries (``--failed``: the dead-lettered ones) with their channel, run, gate, attempts and
last error (a status code or an error class; never a URL, a secret or a response body), only those of runs the
principal (``--as``) may read under the access policy: an operator sees every tenant's. ``deliver --once``
posts what is due and exits (for cron-like use where no worker or ``serve`` runs the deliverer); without
``--once`` it keeps delivering until interrupted. It posts every tenant's deliveries, so under an access
policy only an operator may run it. ``retry ID`` re-queues a delivery that failed for good (due at once, its
attempts counted afresh, audited ``notification_retried``): operators only under an access policy, too.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import TYPE_CHECKING

import click

from sealflow.cli.exits import fail_usage, refuse
from sealflow.cli.options import access_option, as_option, json_flag, metrics_options, store_option
from sealflow.cli.session import load_access, load_config, open_store

if TYPE_CHECKING:
    from sealflow.runtime.telemetry.metrics import Metrics
    from sealflow.store.base import Store


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


@click.group()
def notifications() -> None:
    """Approval notifications (webhook, Slack): list deliveries, deliver what is due."""


@notifications.command("list")
@click.option("--failed", is_flag=True, help="Only deliveries given up after their attempts (dead-lettered).")
@click.option("--run", "run_id", metavar="RUN", help="Only the deliveries of this run.")
@click.option("--tenant", metavar="NAME", default=None, help="Only this tenant's deliveries (default: all).")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10_000))
@store_option
@as_option
@access_option
@json_flag("Print a JSON list.")
def list_(failed: bool, run_id: str | None, tenant: str | None, limit: int, store_url: str | None, principal: str,
          access_path: str | None, as_json: bool) -> None:
    """Deliveries, newest first: id, state, channel, run, gate, attempts, next try, last error (only those
    of runs you may read: runs:read, or your own runs; an operator sees every tenant's)."""
    from sealflow.operations.notifications import admin

    access = load_access(access_path)
    store = open_store(store_url)
    try:  # the principal is authorised, not the --tenant it names: a run it may not read is not listed
        records = admin.listing(store, access, principal, tenant=tenant, failed=failed, run_id=run_id, limit=limit)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps([admin.as_dict(r) for r in records], indent=2))
        return
    if not records:
        click.echo("no failed notification deliveries" if failed else "no notification deliveries")
    for r in records:
        due = f"next try {_when(r.next_at)}" if r.state == "pending" else f"at {_when(r.updated_at)}"
        click.echo(f"{r.id}  {r.state:<9} {r.channel:<12} {r.run_id} {r.step_id:<16} attempts {r.attempts}  {due}"
                   + (f"  last error: {r.last_error}" if r.last_error else ""))


@notifications.command("deliver")
@click.option("--once", is_flag=True, help="Post what is due now (retries included) and exit.")
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="Seconds between rounds (without --once).")
@store_option
@as_option
@access_option
@json_flag("Print the counts as one JSON object (with --once).")
@metrics_options
def deliver(once: bool, interval: float, store_url: str | None, principal: str, access_path: str | None, as_json: bool,
            metrics_port: int | None, metrics_addr: str) -> None:
    """Post the due approval notifications of the store per the configuration's notifications: section
    (every tenant's: operators only under an access policy)."""
    from sealflow.core.errors import ConfigError
    from sealflow.execution.secrets import chain_for
    from sealflow.operations.notifications import Deliverer, load
    from sealflow.policy.operations import OperatorOnly, require_operator

    try:
        require_operator(load_access(access_path), principal, "deliver the approval notifications")
    except OperatorOnly as exc:
        refuse(exc, hint="ask an operator of the access policy (its top-level `operators`) to do it, or let the "
                         "workers and `sealflow serve` deliver them")
    config = load_config()
    try:
        notify = load(config)
    except ConfigError as exc:
        fail_usage(str(exc))
    if once and metrics_port is not None:
        fail_usage("--metrics-port is for a deliverer that keeps running: a --once round ends before a scraper "
                   "could read it (its counts are printed; add --json for a machine)")
    if not notify.channels:
        fail_usage(f"{config.source or 'the runtime configuration'} has no notifications.channels: nothing to "
                   "deliver to (see docs/operations.md, Approval notifications)")
    store = open_store(store_url)
    try:
        deliverer = Deliverer(store, notify, chain_for(config), metrics=_metrics(store, metrics_port, metrics_addr))
        if not once:
            click.echo(f"delivering approval notifications to {len(notify.channels)} channel(s); Ctrl-C stops",
                       err=True)
            stop = threading.Event()
            try:
                deliverer.run(stop, interval)
            except KeyboardInterrupt:
                stop.set()
            return
        report = deliverer.drain()
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(report)))
    else:
        click.echo(f"{report.delivered} delivered, {report.retried} to retry later, {report.failed} failed for good")


def _metrics(store: Store, port: int | None, addr: str) -> Metrics | None:
    """The deliverer's metrics served on ``addr:port`` (None without ``--metrics-port``): its attempts counted
    as a worker's deliverer counts them, and the store's state read at each scrape."""
    if port is None:
        return None
    from sealflow.runtime.telemetry.metrics import Metrics, serve_metrics

    metrics = Metrics(store)
    try:
        serve_metrics(metrics, port, addr)
    except OSError as exc:
        store.close()
        fail_usage(f"--metrics-port {port}: cannot listen on {addr}:{port}: {exc}")
    return metrics


@notifications.command("retry")
@click.argument("delivery_id", metavar="ID")
@store_option
@as_option
@access_option
@json_flag("Print the re-queued delivery as one JSON object.")
def retry(delivery_id: str, store_url: str | None, principal: str, access_path: str | None, as_json: bool) -> None:
    """Re-queue the failed delivery ID (see `list --failed`): due at once, with its attempts counted afresh
    (operators only under an access policy; audited notification_retried)."""
    from sealflow.operations.notifications import admin
    from sealflow.policy.operations import OperatorOnly
    from sealflow.store.errors import InvalidOperation, NotFound

    access = load_access(access_path)
    store = open_store(store_url)
    try:
        before = admin.retry(store, access, principal, delivery_id)
    except OperatorOnly as exc:
        refuse(exc, hint="ask an operator of the access policy (its top-level `operators`) to do it")
    except NotFound as exc:
        fail_usage(f"{exc} (see `sealflow notifications list`)")
    except InvalidOperation as exc:
        refuse(exc, hint="`sealflow notifications list --failed` lists those")
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(admin.retried(before)))
    else:
        click.echo(f"{before.id} re-queued on channel {before.channel} (run {before.run_id}, gate {before.step_id}; "
                   f"{before.attempts} attempt(s) before): the next delivery round posts it")


def register(group: click.Group) -> None:
    group.add_command(notifications)
