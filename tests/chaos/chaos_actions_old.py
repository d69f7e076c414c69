"""The chaos workflow's actions as an older release had them: ``chaos.work`` only, no ``chaos.deliver``.

The chaos suite's fourth worker loads this module, as a worker not yet upgraded would during a rolling
deployment: it runs the workflow's work steps and leaves every effect step it is sent (audited ``step.left``),
which a worker that has the action takes over (:mod:`sealflow.runtime.takeover`)."""

from __future__ import annotations

import random
import time

from sealflow import action


@action("chaos.work", permissions=["chaos:work"])
def work(ctx, n: int) -> dict:
    time.sleep(random.uniform(0.1, 0.6))
    return {"n": n + 1}
