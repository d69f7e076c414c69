"""``sealflow events send``: sign one event the way a Standard Webhooks provider does and post it to a
server's ``POST /v1/events/{source}`` (for testing a ``trigger.event`` definition end to end).

    SEALFLOW_SECRET_CRM_WEBHOOK_SECRET=whsec_... sealflow events send crm crm.lead.created \\
        --data '{"lead_id": "lead_acme"}' --secret CRM_WEBHOOK_SECRET --url http://127.0.0.1:8300
"""

from __future__ import annotations

import json
import time
import uuid

import click

from sealflow.cli.exits import fail_usage


@click.group()
def events() -> None:
    """Signed events from webhook providers (docs/operations.md "Events from a webhook provider")."""


@events.command("send")
@click.argument("source")
@click.argument("event_type", metavar="TYPE")
@click.option("--data", default="{}", show_default=True, help="The event's data (JSON): the run's input.")
@click.option("--secret", "secret_name", required=True, metavar="NAME",
              help="The name of the source's signing secret (read from $SEALFLOW_SECRET_NAME or the secrets "
                   "directory; never given on the command line).")
@click.option("--url", default="http://127.0.0.1:8300", show_default=True, envvar="SEALFLOW_URL",
              help="The server ($SEALFLOW_URL).")
@click.option("--id", "event_id", default=None, metavar="ID", help="The webhook-id (default: a new one); send the "
              "same id again to see the first answer returned.")
@click.option("--timestamp", type=int, default=None, help="The webhook-timestamp (default: now).")
def send(source: str, event_type: str, data: str, secret_name: str, url: str, event_id: str | None,
         timestamp: int | None) -> None:
    """Sign and post one event of TYPE from SOURCE; print the server's answer."""
    import urllib.error
    import urllib.request

    from sealflow.execution import secrets
    from sealflow.server import events as signed

    try:
        payload = json.loads(data)
    except ValueError as exc:
        fail_usage(f"--data is not JSON: {exc}")
    try:
        secret = secrets.chain_for(None).resolve([secret_name])[secret_name]
    except Exception as exc:  # noqa: BLE001
        fail_usage(f"--secret {secret_name}: {getattr(exc, 'message', exc)}")
    body = json.dumps({"type": event_type, "data": payload}).encode()
    event_id = event_id or "msg_" + uuid.uuid4().hex
    stamp = int(time.time()) if timestamp is None else timestamp
    try:
        signature = signed.sign(secret, event_id, stamp, body)
    except signed.EventRefused as exc:
        fail_usage(f"--secret {secret_name}: {exc.message}")
    headers = {"webhook-id": event_id, "webhook-timestamp": str(stamp), "webhook-signature": signature,
               "content-type": "application/json"}
    request = urllib.request.Request(f"{url.rstrip('/')}/v1/events/{source}", data=body, headers=headers,
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - the operator's own URL
            click.echo(response.read().decode())
    except urllib.error.HTTPError as exc:  # the server answered with a problem: print it, exit 1
        click.echo(exc.read().decode(), err=True)
        raise SystemExit(1) from None
    except (urllib.error.URLError, OSError) as exc:
        fail_usage(f"cannot reach {url}: {exc}")


def register(group: click.Group) -> None:
    group.add_command(events)
