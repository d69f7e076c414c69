"""Many runs at once through the in-process worker: everything completes, every effect happens once."""

from __future__ import annotations

import collections
import random
import threading
import time

from interp_helpers import S, make_plan, retry

from sealflow.core.errors import StepError
from sealflow.execution.actions import Registry, action
from sealflow.runtime.facade import Runtime


def test_concurrent_runs_with_retries_and_duplicate_delivery(tmp_path):
    # Given actions that sometimes fail transiently, and a broker that delivers some messages twice
    registry, effects, lock = Registry(), collections.Counter(), threading.Lock()
    rng = random.Random(3)

    @action("t.work", registry=registry)
    def work(ctx, n):
        with lock:
            flaky = rng.random() < 0.2 and ctx.attempt == 1
        if flaky:
            raise StepError("unavailable", "try again")
        with lock:
            effects[(ctx.run_id, ctx.step_id)] += 1
        return n

    plan = make_plan(*[S(f"s{i}", "action", action="t.work", args={"n": i},
                         retry=retry("unavailable", initial_ms=1, jitter="full")) for i in range(6)],
                     output="${{ steps.s5.output }}")
    with Runtime(f"sqlite:///{tmp_path}/load.db", registry, {}, worker_threads=4, sleep_threshold=1.0) as rt:
        real = rt.actor.send
        rt.actor.send = lambda *m: (real(*m), real(*m) if rng.random() < 0.3 else None)
        # When 40 runs go at once
        ids = [rt.submit(plan, {}, initiator="u") for _ in range(40)]
        started = time.monotonic()
        for run_id in ids:
            rt.drive(run_id, timeout=30)
        elapsed = time.monotonic() - started
        # Then all complete and each step's effect happened exactly once
        assert [rt.status(r).state for r in ids] == ["completed"] * 40
        assert len(effects) == 240 and set(effects.values()) == {1}
        assert elapsed < 30
