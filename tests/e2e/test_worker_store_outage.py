"""A worker rides out its PostgreSQL store being down at start: it says so, retries with backoff, and serves
once the database is up, instead of exiting 2 (a usage error to a supervisor) as it did. Found by the chaos
suite (tests/chaos): a worker restarted while PostgreSQL restarted exited.

Uses a private PostgreSQL cluster and a private redis-server (tests/private_services.py).
"""

from __future__ import annotations

import json
import time

from private_services import PrivatePostgres, PrivateRedis
from test_worker_broker_outage import PrivateDeployment


def test_given_postgres_down_when_a_worker_starts_then_it_waits_and_logs_and_serves_once_it_is_up(tmp_path):
    from sealflow.store import migrate_store

    redis = PrivateRedis(tmp_path)
    pg = PrivatePostgres()
    d = PrivateDeployment(tmp_path, redis.port)
    d.store = pg.url
    policy = tmp_path / "access.yaml"
    policy.write_text(json.dumps({"tenants": {"default": {"roles": {"crash": ["crash:write"]},
                                                          "members": {"user:ana": ["crash"]}}}}))
    try:
        # Given a migrated PostgreSQL store that is down
        migrate_store(pg.url)
        pg.stop()
        # When a worker starts on it
        d.start_worker("a")
        d.wait_log("a", "cannot reach the store: cannot open PostgreSQL store", timeout=30)
        time.sleep(1.0)
        # Then it is still running, waiting (not exited 2), and says what it waits for
        assert d.workers["a"].poll() is None and "worker ready" not in d.log("a", "out")
        assert "retrying in" in d.log("a") and "start the database or fix --store" in d.log("a")
        # When PostgreSQL comes up, then the worker serves: a run submitted now completes
        pg.start()
        d.wait_ready("a", timeout=90)
        run_id = d.submit("--as", "user:ana", "--access", str(policy))
        deadline = time.monotonic() + 60
        while True:
            done = d.sealflow("status", run_id, "--store", pg.url, "--as", "user:ana", "--access", str(policy),
                              "--json")
            state = json.loads(done.stdout)["state"] if done.returncode in (0, 1, 3) else done.stderr
            if state == "completed":
                break
            assert time.monotonic() < deadline, f"{state}: {d.log('a')[-3000:]}"
            time.sleep(0.3)
        assert "the store answers after" in d.log("a")
    finally:
        d.close()
        redis.close()
        pg.close()
