"""Locks and pools at run time, on every store: no overlap, arrival order, durable waiting, fencing tokens.

Each action records when it started and ended (real time); the checks are on those intervals.
"""

from __future__ import annotations

import threading
import time

import pytest
from interp_helpers import BACKENDS, S, make_plan

from sealflow.execution.actions import Registry, action
from sealflow.runtime.config import RuntimeConfig
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store


class World:
    """Actions that record their intervals; ``hold`` blocks until released."""

    def __init__(self):
        self.registry = Registry()
        self.release = threading.Event()
        self.mutex = threading.Lock()
        self.intervals: list[tuple[str, float, float, int | None]] = []  # (label, start, end, fencing token)
        self.started: list[str] = []

        @action("t.hold", registry=self.registry)
        def hold(ctx, label: str = "", seconds: float = 0.05):
            start = time.monotonic()
            with self.mutex:
                self.started.append(label)
            if label.startswith("first"):
                self.release.wait(30)
            else:
                time.sleep(seconds)
            with self.mutex:
                self.intervals.append((label, start, time.monotonic(), ctx.fencing_token))
            return label

        @action("t.quick", registry=self.registry)
        def quick(ctx):
            return "quick"


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/locks.db"
    return request.getfixturevalue("pg_schema").url(migrate="1")


@pytest.fixture
def serving(url):
    """Start a runtime working, dispatching and sweeping on a background thread (as `sealflow worker`)."""
    made = []

    def start(world, *, threads=4, config=None):
        rt = Runtime(open_store(url), world.registry, {}, worker_threads=threads, worker_timeout_ms=20,
                     config=config or RuntimeConfig())
        stop = threading.Event()
        thread = threading.Thread(target=rt.serve, args=(stop,), kwargs={"interval": 0.02, "allow_open": True},
                                  daemon=True)
        thread.start()
        made.append((rt, stop, thread, world))
        return rt

    yield start
    for rt, stop, thread, world in made:
        world.release.set()
        stop.set()
        thread.join(10)
        rt.close()
        rt.store.close()


def wait_for(predicate, seconds=15.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def most_at_once(intervals) -> int:
    edges = sorted([(s, 1) for _, s, _, _ in intervals] + [(e, -1) for _, _, e, _ in intervals])
    now = peak = 0
    for _, d in edges:
        now += d
        peak = max(peak, now)
    return peak


def locked(resource="resource-1", **kw):
    return make_plan(S("work", "action", action="t.hold", lock=resource, timeout_ms=20_000,
                       args={"label": "${{ input.label }}"}, **kw),
                     name="locked")


def submit(rt, plan, label, tenant="default"):
    return rt.submit(plan, {"label": label}, initiator="user:ana", tenant=tenant)


def test_two_runs_holding_one_lock_never_overlap_and_tokens_grow(serving):
    # Given a worker with 4 threads and six runs whose step holds lock resource-1
    world = World()
    world.release.set()
    rt = serving(world)
    runs = [submit(rt, locked(), f"r{i}") for i in range(6)]
    # When they all complete
    assert wait_for(lambda: all(rt.store.get_run(r).state == "completed" for r in runs))
    # Then no two actions ran at once, and each later holder had a larger fencing token
    assert most_at_once(world.intervals) == 1
    by_start = sorted(world.intervals, key=lambda i: i[1])
    tokens = [i[3] for i in by_start]
    assert tokens == sorted(tokens) and len(set(tokens)) == 6 and None not in tokens


def test_a_lock_is_per_tenant_and_per_name(serving):
    # Given a run holding resource-1 of tenant acme
    world = World()
    rt = serving(world)
    held = submit(rt, locked(), "first", tenant="acme")
    assert wait_for(lambda: world.started == ["first"])
    # When globex locks the same name and acme another name / Then both run meanwhile
    other_tenant = submit(rt, locked(), "globex", tenant="globex")
    other_name = submit(rt, locked("resource-2"), "acme-2", tenant="acme")
    assert wait_for(lambda: all(rt.store.get_run(r).state == "completed" for r in (other_tenant, other_name)))
    assert rt.store.get_run(held).state == "running"


def test_waiters_start_in_arrival_order_without_holding_a_thread_or_a_message(serving):
    # Given one run holding the lock (its action blocks) and a worker of 2 threads
    world = World()
    rt = serving(world, threads=2)
    plan = locked()
    first = submit(rt, plan, "first")
    assert wait_for(lambda: world.started == ["first"])
    # When four more runs arrive one after the other
    waiters = []
    for i in range(4):
        waiters.append(submit(rt, plan, f"w{i}"))
        assert wait_for(lambda n=i + 1: len([h for h in rt.store.slots(time.time()) if h.fence is None]) == n)
    # Then they wait in the store: each attempt scheduled, its outbox row unsent and due later (no message
    # in the broker), and the worker's other thread is free: a run without the lock completes meanwhile
    for run_id in waiters:
        (row,) = rt.store.outbox(run_id)
        assert rt.store.attempts(run_id)[0].state == "scheduled" and row.sent_at is None
    quick = rt.submit(make_plan(S("q", "action", action="t.quick")), {}, initiator="user:ana")
    assert wait_for(lambda: rt.store.get_run(quick).state == "completed")
    # When the holder finishes / Then the waiters ran one at a time, in the order they arrived
    world.release.set()
    assert wait_for(lambda: all(rt.store.get_run(r).state == "completed" for r in [first, *waiters]))
    assert world.started == ["first", "w0", "w1", "w2", "w3"]
    assert most_at_once(world.intervals) == 1
    # and waiting was not an attempt: one attempt per run
    assert all(len(rt.store.attempts(r)) == 1 for r in waiters)


def test_a_pool_never_has_more_holders_than_its_limit(serving):
    # Given pool email limited to 2 in the runtime configuration, and a worker of 6 threads
    world = World()
    world.release.set()
    rt = serving(world, threads=6, config=RuntimeConfig(pools={"email": 2}))
    plan = make_plan(S("send", "action", action="t.hold", concurrency="email",
                       args={"label": "${{ input.label }}", "seconds": 0.15}), name="mailer")
    runs = [submit(rt, plan, f"m{i}") for i in range(8)]
    assert wait_for(lambda: all(rt.store.get_run(r).state == "completed" for r in runs), 30)
    # Then at most 2 sends ran at once, and the pool was used (2 at once, not 1)
    assert most_at_once(world.intervals) == 2


def test_run_level_concurrency_holds_one_run_per_key_from_start_to_end(serving):
    # Given runs keyed by customer, limit 1, each run two steps; the first run of c1 is busy
    world = World()
    rt = serving(world, threads=4)
    plan = make_plan(S("a", "action", action="t.hold", args={"label": "${{ input.label }}:a"}),
                     S("b", "action", action="t.hold", args={"label": "${{ input.label }}:b"}),
                     name="per-customer", concurrency={"key": "${{ input.customer }}", "limit": 1})
    runs = [rt.submit(plan, {"label": "first", "customer": "c1"}, initiator="user:ana")]
    assert wait_for(lambda: world.started == ["first:a"])
    # When two more runs of c1 arrive, one after the other, and one of c2
    for i in (1, 2):
        runs.append(rt.submit(plan, {"label": f"c1-{i}", "customer": "c1"}, initiator="user:ana"))
        assert wait_for(lambda n=i: len([h for h in rt.store.slots(time.time()) if h.fence is None]) == n)
    other = rt.submit(plan, {"label": "c2", "customer": "c2"}, initiator="user:ana")
    # Then c2's run completes meanwhile (another key) and c1's wait, queued
    assert wait_for(lambda: rt.store.get_run(other).state == "completed")
    assert [rt.store.get_run(r).state for r in runs[1:]] == ["queued", "queued"]
    # When the first run goes on / Then c1's runs ran whole (a to b) one after the other, in arrival order
    world.release.set()
    assert wait_for(lambda: all(rt.store.get_run(r).state == "completed" for r in runs), 30)
    c1 = [label for label in world.started if not label.startswith("c2")]
    assert c1 == ["first:a", "first:b", "c1-1:a", "c1-1:b", "c1-2:a", "c1-2:b"]
    assert most_at_once([i for i in world.intervals if not i[0].startswith("c2")]) == 1


def test_a_lock_template_that_fails_fails_the_step_with_a_clear_error(serving):
    # Given a lock naming a missing input field
    world = World()
    rt = serving(world)
    plan = make_plan(S("work", "action", action="t.quick", lock="${{ input.missing.deeper }}"), name="bad-lock")
    run_id = rt.submit(plan, {}, initiator="user:ana")
    assert wait_for(lambda: rt.store.get_run(run_id).state == "failed")
    run = rt.store.get_run(run_id)
    # Then the action never ran and the error names the lock
    assert run.error_class == "invalid_request" and "lock of step 'work'" in run.error_message


def test_a_worker_that_never_saw_the_plan_takes_the_lock(url, serving):
    # Given a run with a lock submitted by one runtime that does not work
    world = World()
    submitter = Runtime(open_store(url), world.registry, {})
    try:
        run_id = submit(submitter, locked(), "fresh")
    finally:
        submitter.close()
        submitter.store.close()
    # When a worker whose engine has no plan cached takes its message
    rt = serving(world)
    # Then it loads the plan outside the claim, takes the lock and runs the step with a fencing token
    assert wait_for(lambda: rt.store.get_run(run_id).state == "completed")
    assert [(i[0], i[3] is not None) for i in world.intervals] == [("fresh", True)]
