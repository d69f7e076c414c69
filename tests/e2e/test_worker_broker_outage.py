"""A worker rides out its broker: started with Redis down it waits and says so, then serves when Redis
comes up; a Redis restarted without persistence (its queues lost) does not leave runs queued for a minute.

Each test starts its own redis-server on a private port (skipped without the redis-server binary).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from private_services import PrivateRedis, free_port
from test_worker_redis import Deployment, waits_for_the_broker_then_serves

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="no redis-server binary")


class PrivateDeployment(Deployment):
    def __init__(self, tmp_path: Path, port: int):
        super().__init__(tmp_path, None, f"redis://127.0.0.1:{port}/0")

    def close(self) -> None:
        self.kill_all()


def test_given_redis_down_when_a_worker_starts_then_it_waits_and_logs_and_serves_once_redis_is_up(tmp_path):
    redis = PrivateRedis(tmp_path, free_port(), start=False)
    d = PrivateDeployment(tmp_path, redis.port)
    try:
        # Given no Redis on the port, when a worker starts and a run is submitted, then it waits, logging, the
        # run queued; when Redis comes up, then the worker serves and the run completes
        waits_for_the_broker_then_serves(d, redis.start, ready_timeout=60)
    finally:
        d.close()
        redis.close()


def test_given_a_serving_worker_when_redis_restarts_empty_then_queued_runs_move_within_seconds(tmp_path):
    redis = PrivateRedis(tmp_path)
    d = PrivateDeployment(tmp_path, redis.port)
    try:
        # Given a worker serving on a private Redis
        d.start_worker("a")
        d.wait_ready("a")
        # When Redis dies, a run is submitted meanwhile, and Redis comes back empty
        redis.kill()
        run_id = d.submit()
        d.wait_log("a", "lost the broker", timeout=30)
        redis.start()
        back = time.monotonic()
        # Then the worker says the broker is back and the run completes well before redeliver_after (60 s)
        d.wait_completed([run_id], timeout=30)
        assert time.monotonic() - back < 30
        assert d.workers["a"].poll() is None
    finally:
        d.close()
        redis.close()
