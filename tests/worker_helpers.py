"""Shared pieces of the tests that run workers on a real broker: the local Redis, or a skip without it."""

from __future__ import annotations

from typing import Any

import pytest

REDIS = "redis://127.0.0.1:6379/0"


def redis_or_skip() -> Any:
    """A client of the Redis at 127.0.0.1:6379 that answered a ping; skips the test without one."""
    try:
        import redis

        client = redis.Redis.from_url(REDIS, socket_connect_timeout=1, socket_timeout=5)
        client.ping()
        return client
    except Exception:  # noqa: BLE001 - not installed, not running, refused: all mean "no Redis here"
        pytest.skip("Redis not reachable at 127.0.0.1:6379")
