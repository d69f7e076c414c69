"""Actions of the chaos workflow: ``chaos.work`` (a few milliseconds of work, no effect) and
``chaos.deliver`` (an external effect: a POST to the receiver at ``$CHAOS_RECEIVER`` carrying the step's
idempotency key, as a payment or e-mail provider would be called). Both hold on a little so that worker
kills land inside steps, and between an effect and its commit."""

from __future__ import annotations

import json
import os
import random
import time
import urllib.error
import urllib.request

from sealflow.interpreter import action


@action("chaos.work", permissions=["chaos:work"])
def work(ctx, n: int) -> dict:
    time.sleep(random.uniform(0.1, 0.6))  # a call to some service
    return {"n": n + 1}


@action("chaos.deliver", permissions=["chaos:deliver"], effect="irreversible")
def deliver(ctx, effect: str, n: int) -> dict:
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
