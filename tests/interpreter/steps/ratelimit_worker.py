"""A worker process for the cross-process rate limit test (run by test_rate_limits_across_processes.py).

``python ratelimit_worker.py STORE_URL BASE_URL CLOCK_FILE COUNT PREFIX STOP_FILE``: submits COUNT runs of
an ``ai`` step calling model ``shared`` (the fake server at BASE_URL, ``rate_limit: {requests_per_minute: 3}``),
then works and sweeps until STOP_FILE exists. Its clock reads the time from CLOCK_FILE, which the test moves
(one clock for both processes, no sleeping through a real minute).
"""

from __future__ import annotations

import os
import sys
import time

from interp_helpers import S, make_plan, serve_until

from sealflow.core.clock import Clock
from sealflow.dsl.plan import AiPlan
from sealflow.execution.actions import Registry
from sealflow.providers.loader import load_models
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store

SCHEMA = {"type": "object", "required": ["label"], "additionalProperties": False,
          "properties": {"label": {"type": "string"}}}


class FileClock(Clock):
    """The time written in a file (by the test); sleeping is real, and short."""

    def __init__(self, path: str):
        self.path = path

    def now(self) -> float:
        with open(self.path) as fh:
            return float(fh.read().strip())

    def sleep(self, seconds: float) -> None:
        time.sleep(min(max(seconds, 0.0), 0.05))


def main(url: str, base_url: str, clock_file: str, count: int, prefix: str, stop_file: str) -> None:
    models = {"models": {"shared": {"provider": "openai", "model": "shared", "base_url": base_url,
                                    "rate_limit": {"requests_per_minute": 3}}}}
    rt = Runtime(open_store(url, clock=FileClock(clock_file)), Registry(), load_models(models), worker_threads=2,
                 worker_timeout_ms=20)
    plan = make_plan(S("label", "ai", ai=AiPlan(model="shared", prompt_template="Label ${{ input.n }}",
                                                output_schema=SCHEMA, max_tokens=20)), name="limited")
    for i in range(count):
        rt.submit(plan, {"n": f"{prefix}{i}"}, initiator="user:ana")
    serve_until(rt, lambda: os.path.exists(stop_file), bound=300)

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6])
