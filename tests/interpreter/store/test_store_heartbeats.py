"""Liveness by heartbeat (PostgreSQL): a worker silent past the limit loses its leases to the others, on
any machine; one that beats keeps them. (SQLite has no heartbeats: dead workers are judged by pid.)"""

from __future__ import annotations

from test_store_suite import T0, new_run

from sealflow.engine.recovery import expire_dead_owners
from sealflow.store import open_store


def test_given_a_silent_and_a_beating_worker_when_liveness_is_checked_then_only_the_silent_ones_leases_end(
        pg_schema):
    store = open_store(pg_schema.url(clock="caller", migrate="1", pool_max="2"))
    try:
        # Given two runs, one claimed by a worker on another machine that never beats, one by a worker that does
        for run_id, owner in (("r-ghost", "far:1:ghost"), ("r-alive", "far:2:alive")):
            store.submit(new_run(run_id), T0)
            (msg,) = [m for m in store.take_outbox(T0) if m[0] == run_id]
            store.claim(*msg, owner=owner, now=T0)
        store.heartbeat("far:2:alive")
        # When this worker checks liveness with a 5 s limit
        ended = expire_dead_owners(store, T0 + 1, "here:3:me", silent_for=5.0, heartbeats=store)
        # Then the silent worker's lease ended (its attempt is scheduled again, saying why) and the beating one's
        # did not
        assert ended == 1
        ghost = store.active_attempt("r-ghost")
        assert (ghost.state, ghost.leases_lost) == ("scheduled", 1)
        assert ghost.error_message == "worker far:1:ghost: sent no heartbeat for 5 s"
        assert store.active_attempt("r-alive").lease_expires > T0 + 1
    finally:
        store.close()
