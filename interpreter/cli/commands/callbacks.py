"""``sealflow callbacks complete TOKEN``: post the result of an action step's callback from the command line (as the
called system would with ``POST /v1/callbacks/{token}``: docs/language.md, "Callbacks"), then drive the run on.

    sealflow callbacks complete "$TOKEN" --data '{"image_url": "https://..."}'
    sealflow callbacks complete "$TOKEN" --failed unavailable --message "the renderer gave up"

The token is read from the argument or, with ``-``, from standard input (so it stays out of the shell's history).
"""

from __future__ import annotations

import json
import sys

import click

from sealflow.cli.exits import fail_usage, refuse
from sealflow.cli.options import on_a_store


@click.group()
def callbacks() -> None:
    """Results of action steps that wait for a callback (``callback:``)."""


@callbacks.command("complete")
@click.argument("token")
@click.option("--data", default=None, help="The result (JSON) the step completes with.")
@click.option("--failed", "failed", metavar="CLASS", default=None,
              help="Fail the step with this error class instead (timeout, unavailable, invalid_request, ...).")
@click.option("--message", default="", help="With --failed: what went wrong (recorded with the failure).")
@on_a_store(actions=True)
def complete(token: str, data: str | None, failed: str | None, message: str, actions: tuple[str, ...],
             store_url: str | None, principal: str, tenant: str, access_path: str | None, as_json: bool) -> None:
    """Complete (--data) or fail (--failed) the step waiting for callback TOKEN ('-': read it from stdin)."""
    from sealflow.cli import render
    from sealflow.cli.session import open_runtime
    from sealflow.execution.callbacks import CallbackRefused

    if token == "-":
        token = sys.stdin.readline().strip()
    if (data is None) == (failed is None):
        fail_usage("give exactly one of --data JSON (the result) or --failed CLASS")
    value = None
    if data is not None:
        try:
            value = json.loads(data)
        except ValueError as exc:
            fail_usage(f"--data is not JSON: {exc}")
    with open_runtime(store_url, actions, access=access_path) as rt:
        try:
            done = rt.complete_callback(token, data=value, failed=failed, message=message, actor=principal,
                                        tenant=tenant)
        except CallbackRefused as exc:
            if exc.reason == "malformed" and failed is not None:
                fail_usage(exc.message)
            refuse(f"callback {exc.reason}: {exc.message}")
        render.finish(rt.drive(done["run_id"]), as_json)


def register(group: click.Group) -> None:
    group.add_command(callbacks)
