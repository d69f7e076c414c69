"""The metrics the shipped alert rules need beyond the counters (tools/deploy/prometheus/alerts.yaml): gates
about to time out, workers alive by store heartbeat, store errors. Real stores, real scrapes."""

from __future__ import annotations

import threading
import time

from interp_helpers import S, approval, make_plan
from prometheus_client.parser import text_string_to_metric_families
from test_metrics import value

from sealflow.runtime.facade import Runtime
from sealflow.runtime.telemetry.metrics import Metrics
from sealflow.store import open_store


def families_of(metrics: Metrics) -> dict[str, tuple[str, list]]:
    return {f.name: (f.type, f.samples) for f in text_string_to_metric_families(metrics.exposition().decode())}


def test_an_open_approval_gate_is_counted_with_the_seconds_until_it_times_out(runtime, clock):
    # Given no gate open: the soonest-expiry gauge has no sample (an alert on it cannot fire)
    families = families_of(runtime.telemetry.metrics)
    assert value(families, "sealflow_approval_gates_open") == 0
    assert families["sealflow_approval_gate_soonest_expiry_seconds"][1] == []
    # When a run opens an approval gate with a one-hour timeout, and 20 minutes pass on the runtime's clock
    plan = make_plan(S("ask", "approval", approval=approval(timeout_ms=3_600_000)))
    status = runtime.run(plan, {}, initiator="user:ana", until="settled")
    assert status.state == "waiting"
    clock.advance(1200)
    # Then the scrape counts one gate, timing out in 40 minutes
    families = families_of(runtime.telemetry.metrics)
    assert value(families, "sealflow_approval_gates_open") == 1
    assert value(families, "sealflow_approval_gate_soonest_expiry_seconds") == 2400


def test_a_worker_beating_on_postgresql_is_counted_alive_and_a_silent_one_is_not(pg_schema):
    # Given a PostgreSQL store on which one worker beats now
    store = open_store(pg_schema.url(migrate="1", pool_max="2"))
    try:
        store.heartbeat("host:1:alive")
        with store._conn() as raw:  # a worker whose last beat is a minute old
            raw.execute("INSERT INTO workers (owner, heartbeat_at) "
                        "VALUES ('host:2:silent', now() - interval '1 minute')")
        # When the metrics are scraped
        families = families_of(Metrics(store))
        # Then only the beating worker is alive
        assert value(families, "sealflow_workers_alive") == 1
    finally:
        store.close()


def test_a_sqlite_store_has_no_heartbeats_so_no_workers_gauge(tmp_path):
    # Given a SQLite store (dead workers judged by pid, no heartbeats)
    store = open_store(f"sqlite:///{tmp_path}/s.db")
    try:
        # When scraped, Then there is no workers gauge (an alert on it must use the scrape's `up`) and no error
        families = families_of(Metrics(store))
        assert "sealflow_workers_alive" not in families
        assert value(families, "sealflow_store_errors_total", where="scrape") == 0
    finally:
        store.close()


def test_a_store_that_fails_its_reads_at_scrape_time_is_counted_as_store_errors(tmp_path):
    # Given the metrics of a runtime whose store was closed under it (every read fails)
    rt = Runtime(open_store(f"sqlite:///{tmp_path}/s.db"))
    metrics = rt.telemetry.metrics
    assert value(families_of(metrics), "sealflow_store_errors_total", where="scrape") == 0
    rt.store.close()
    # When it is scraped
    families = families_of(metrics)
    # Then the scrape still answers, without the store's families, and counts each failed read
    assert "sealflow_dead_letters" not in families
    assert value(families, "sealflow_store_errors_total", where="scrape") >= 3
    assert value(families, "sealflow_store_errors_total", where="round") == 0


def test_a_worker_round_the_store_refuses_is_counted_as_a_store_error(tmp_path):
    # Given a long-lived worker loop serving a SQLite store
    rt = Runtime(open_store(f"sqlite:///{tmp_path}/s.db"))
    stop = threading.Event()
    loop = threading.Thread(target=rt.serve, args=(stop,), kwargs={"allow_open": True, "interval": 0.05}, daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 10
        while getattr(rt, "_left_steps", None) is None and time.monotonic() < deadline:  # (serving its rounds)
            time.sleep(0.02)
        # When its store stops answering (closed under it: every round's read fails with a store error)
        rt.store.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and value(families_of(rt.telemetry.metrics), "sealflow_store_errors_total",
                                                    where="round") == 0:
            time.sleep(0.05)
        # Then the failed rounds are counted (and the loop keeps going)
        assert value(families_of(rt.telemetry.metrics), "sealflow_store_errors_total", where="round") >= 1
        assert loop.is_alive()
    finally:
        stop.set()
        loop.join(10)
