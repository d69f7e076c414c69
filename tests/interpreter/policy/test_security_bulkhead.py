"""Per-tenant bulkheads: a burst of one tenant cannot starve another's runs; deferred claims are not failures."""

from __future__ import annotations

import threading
import time

import pytest
from interp_helpers import S, make_plan

from sealflow.execution.actions import Registry, action
from sealflow.runtime.config import RuntimeConfig, TenantLimits
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store


class World:
    def __init__(self):
        self.registry = Registry()
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.running = {"acme": 0, "globex": 0}
        self.peak = {"acme": 0, "globex": 0}

        @action("t.slow", registry=self.registry)
        def slow(ctx):
            with self.lock:
                self.running[ctx.tenant] += 1
                self.peak[ctx.tenant] = max(self.peak[ctx.tenant], self.running[ctx.tenant])
            try:
                self.gate.wait(20)
            finally:
                with self.lock:
                    self.running[ctx.tenant] -= 1
            return "slow"

        @action("t.quick", registry=self.registry)
        def quick(ctx):
            return "quick"


def serving(tmp_path, world, config):
    """A runtime working, dispatching and sweeping on a background thread (as `sealflow worker` does)."""
    rt = Runtime(open_store(f"sqlite:///{tmp_path}/b.db"), world.registry, {}, worker_threads=3,
                 worker_timeout_ms=20, config=config)
    stop = threading.Event()
    thread = threading.Thread(target=rt.serve, args=(stop,), kwargs={"interval": 0.02, "allow_open": True},
                              daemon=True)
    thread.start()
    return rt, stop, thread


def wait_for(predicate, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def burst_then_one(rt):
    slow = make_plan(S("work", "action", action="t.slow", timeout_ms=30_000), name="burst")
    quick = make_plan(S("work", "action", action="t.quick"), name="quick")
    burst = [rt.submit(slow, {}, initiator="user:ana", tenant="acme") for _ in range(5)]
    time.sleep(0.2)  # the burst is dispatched first
    other = rt.submit(quick, {}, initiator="user:bo", tenant="globex")
    return burst, other


def test_a_burst_of_one_tenant_does_not_block_another_tenants_run(tmp_path):
    # Given tenant acme limited to 1 running step, and a worker with 3 threads
    world = World()
    rt, stop, thread = serving(tmp_path, world, RuntimeConfig(
        tenant_limits={"acme": TenantLimits(max_running_steps=1)}))
    try:
        # When acme submits a burst of 5 slow runs, then globex one quick run
        burst, other = burst_then_one(rt)
        # Then globex's run completes while acme's burst is still held up
        assert wait_for(lambda: rt.store.get_run(other).state == "completed", 10)
        assert not world.gate.is_set() and world.peak["acme"] == 1
        # and acme's deferred runs are not failed: they all complete once the slow work goes on
        world.gate.set()
        assert wait_for(lambda: all(rt.store.get_run(r).state == "completed" for r in burst), 20)
        assert world.peak["acme"] == 1
        for run_id in burst:  # one attempt per step: a deferral is not an attempt
            assert [a.state for a in rt.store.attempts(run_id)] == ["succeeded"]
    finally:
        world.gate.set()
        stop.set()
        thread.join(10)
        rt.close()


def test_without_a_bulkhead_the_burst_takes_every_worker_thread(tmp_path):
    # Given no tenant limits
    world = World()
    rt, stop, thread = serving(tmp_path, world, RuntimeConfig())
    try:
        burst, other = burst_then_one(rt)
        # Then acme holds all 3 threads and globex waits behind it
        assert wait_for(lambda: world.peak["acme"] == 3, 10)
        time.sleep(0.3)
        assert rt.store.get_run(other).state == "queued"
        world.gate.set()
        assert wait_for(lambda: rt.store.get_run(other).state == "completed", 20)
    finally:
        world.gate.set()
        stop.set()
        thread.join(10)
        rt.close()


@pytest.mark.parametrize("limit", [2])
def test_the_limit_counts_running_attempts_of_the_tenant_only(tmp_path, limit):
    # Given every tenant limited to 2 running steps, and acme's burst
    world = World()
    rt, stop, thread = serving(tmp_path, world, RuntimeConfig(
        tenant_limits={"*": TenantLimits(max_running_steps=limit)}))
    try:
        burst, other = burst_then_one(rt)
        # Then acme never runs more than its limit, and globex's own limit is not used up by acme
        assert wait_for(lambda: world.peak["acme"] == limit, 10)
        assert wait_for(lambda: rt.store.get_run(other).state == "completed", 10)
        assert world.peak["acme"] == limit and not world.gate.is_set()
        world.gate.set()
        assert wait_for(lambda: all(rt.store.get_run(r).state == "completed" for r in burst + [other]), 20)
    finally:
        world.gate.set()
        stop.set()
        thread.join(10)
        rt.close()
