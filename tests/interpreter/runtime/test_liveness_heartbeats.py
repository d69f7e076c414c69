"""Every runtime that executes steps heartbeats from before its first claim (service/liveness.py), so a
process driving a run on a shared PostgreSQL store without `serve` (`sealflow run`, `approve`) is not taken
for dead by the workers: they leave its running steps alone, and take them over once it goes silent."""

from __future__ import annotations

import logging
import threading

from interp_helpers import S, make_plan

from sealflow.engine.recovery import expire_dead_owners
from sealflow.execution.actions import Registry, action
from sealflow.runtime import liveness
from sealflow.runtime.facade import Runtime
from sealflow.runtime.liveness import Heartbeats
from sealflow.store import StoreUnavailable, open_store


def test_a_runtime_driving_a_run_without_serve_is_alive_to_the_other_workers(pg_schema):
    # Given a runtime on PostgreSQL that submits a run and drives it (no `serve` loop), its action held open
    url = pg_schema.url(migrate="1")
    registry = Registry()
    entered, release = threading.Event(), threading.Event()

    @action("t.hold", registry=registry)
    def hold(ctx):
        entered.set()
        release.wait(30)
        return "done"

    plan = make_plan(S("only", "action", action="t.hold", timeout_ms=60_000), name="held")
    driver = Runtime(open_store(url), registry, {})
    other = open_store(url)
    try:
        run_id = driver.submit(plan, {}, initiator="user:ana")
        driver.start()
        assert entered.wait(30), "the step never started"
        # When another worker checks liveness with a 5 s limit while the step runs
        ended = expire_dead_owners(other, 0.0, "far:9:other", silent_for=5.0, heartbeats=other)
        # Then the driving process counts as alive: its running step keeps its lease
        assert ended == 0
        attempt = other.active_attempt(run_id)
        assert attempt.state == "running" and attempt.lease_owner == driver.owner
    finally:
        release.set()
        driver.close()
        driver.store.close()
        other.close()


def test_a_closed_runtime_stops_beating(pg_schema):
    # Given a runtime that started (and so beat) and was closed
    url = pg_schema.url(migrate="1")
    rt = Runtime(open_store(url), Registry(), {})
    rt.start()
    assert rt._heartbeats is not None and rt._heartbeats.is_alive()
    beats = rt._heartbeats
    rt.close()
    rt.store.close()
    # Then its heartbeat thread is gone (a process that stopped working goes silent)
    assert not beats.is_alive()


class _AwayStore:
    """A store whose database is unreachable while ``away``: each operation fails as PostgresStore's wrapper
    says so."""

    url = "postgresql://app@db/x"
    away = True

    def heartbeat(self, owner, broker_id=None):
        if self.away:
            raise StoreUnavailable(f"PostgreSQL store {self.url}: heartbeat failed, nothing was changed: "
                                   "connection refused")

    def wait_for_work(self, timeout):
        if self.away:
            raise StoreUnavailable(f"PostgreSQL store {self.url}: listening for new work failed: connection refused")
        return False


def test_given_the_store_away_then_heartbeats_and_wake_ups_say_so_once_in_a_line_without_a_traceback(caplog):
    # Given a store whose database is away
    store = _AwayStore()
    beats = Heartbeats(store, "w1")
    listening = liveness.Outage("the store's wake-ups work again")  # the worker loop's, kept across rounds
    caplog.set_level(logging.INFO, logger="sealflow.liveness")
    # When heartbeats are due and the worker's loop waits for the store's wake-ups, three rounds running
    for _ in range(3):
        beats._beat()
        liveness.wait_for_work(store, threading.Event(), 0.0, listening)
    # Then each says once what failed, naming the store and the cause, with no traceback (an outage is no bug)
    lines = [(r.getMessage(), r.exc_info) for r in caplog.records]
    assert [m for m, _ in lines] == [
        "could not record this worker's heartbeat in the store (PostgreSQL store postgresql://app@db/x: heartbeat "
        "failed, nothing was changed: connection refused); trying at every beat",
        "waiting for the store's wake-ups failed (PostgreSQL store postgresql://app@db/x: listening for new work "
        "failed: connection refused); polling until they work again"]
    assert all(exc is None for _, exc in lines)
    # And when the database is back, each says so once
    caplog.clear()
    store.away = False
    for _ in range(2):
        beats._beat()
        liveness.wait_for_work(store, threading.Event(), 0.0, listening)
    assert [r.getMessage() for r in caplog.records] == ["this worker's heartbeat is recorded in the store again",
                                                        "the store's wake-ups work again"]


def test_an_outage_is_said_once_at_its_levels_on_its_logger_and_once_when_over(caplog):
    # Given the worker loop's outage of its dispatch/sweep rounds (errors on sealflow.runtime)
    rounds = liveness.Outage("dispatch/sweep rounds work again", logger=logging.getLogger("sealflow.runtime"),
                             level=logging.ERROR, over_level=logging.WARNING)
    caplog.set_level(logging.INFO)
    # When three rounds fail, then two work
    for n in range(3):
        rounds.failed("dispatch/sweep round failed: %s; retrying", f"disk full ({n})")
    rounds.ok()
    rounds.ok()
    # Then the failure is said once (the first), at ERROR, and its end once, at WARNING, on that logger
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("sealflow.runtime", "ERROR", "dispatch/sweep round failed: disk full (0); retrying"),
        ("sealflow.runtime", "WARNING", "dispatch/sweep rounds work again")]
