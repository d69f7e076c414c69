"""Actions of the chaos workflow: ``chaos.work`` (a few milliseconds of work, no effect) and
``chaos.deliver`` (an external effect: a POST to the receiver at ``$CHAOS_RECEIVER`` carrying the step's
idempotency key, as a payment or e-mail provider would be called). Both hold on a little so that worker
kills land inside steps, and between an effect and its commit.

A test can hold one effect step of a worker before its POST (the hosts variant makes a zombie of it): with
``$CHAOS_HOLD`` naming a folder, the first ``chaos.deliver`` to start while a file ``hold`` is in it claims it
(creates ``held``, writing its run, step and key there), then waits until the test removes ``hold``; the
others go on. A file, not the network: it works across the test's network namespaces."""

from __future__ import annotations

import json
import os
import random
import time
import urllib.error
import urllib.request
from pathlib import Path

from sealflow import action


@action("chaos.work", permissions=["chaos:work"])
def work(ctx, n: int) -> dict:
    time.sleep(random.uniform(0.1, 0.6))  # a call to some service
    return {"n": n + 1}


@action("chaos.deliver", permissions=["chaos:deliver"], effect="irreversible")
def deliver(ctx, effect: str, n: int) -> dict:
    _held(ctx)
    body = json.dumps({"run": ctx.run_id, "effect": effect, "n": n}).encode()
    request = urllib.request.Request(os.environ["CHAOS_RECEIVER"], data=body, method="POST", headers={
        "Content-Type": "application/json", "Idempotency-Key": ctx.idempotency_key})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            receipt = json.loads(response.read())
    except urllib.error.HTTPError:
        raise  # the receiver refused it (422: the key reused with another body): the step fails, not retried
    except urllib.error.URLError as exc:  # not reached: the class `network`, retried
        raise ConnectionError(f"the receiver at {request.full_url} did not answer: {exc.reason}") from exc
    time.sleep(random.uniform(0.05, 0.4))  # the effect happened; a kill now loses the result before the commit
    return receipt


def _held(ctx) -> None:
    """Wait here while the test holds this step (see the module's docstring); at most 10 minutes."""
    folder = os.environ.get("CHAOS_HOLD")
    if not folder or not (Path(folder) / "hold").exists():
        return
    try:
        fd = os.open(Path(folder) / "held", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return  # another step is the one held
    with os.fdopen(fd, "w") as out:
        json.dump({"run": ctx.run_id, "step": ctx.step_id, "key": ctx.idempotency_key}, out)
    deadline = time.monotonic() + 600
    while (Path(folder) / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
