"""A worker whose broker goes away between its start-up check and its start-up recovery: the recovery's
send fails with a clear ``BrokerUnavailable`` (never the broker client's own error, which ended the
``sealflow worker`` process as an "internal error"), and serving with that loss noted sends again what
the failed recovery took from the outbox as soon as the broker answers, not after ``redeliver_after``.

Found by the chaos suite (tests/chaos): a worker restarted while Redis restarted exited. Uses a private
``redis-server`` (tests/private_services.py).
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from interp_helpers import S, make_plan
from private_services import PrivateRedis

from sealflow.execution.actions import action
from sealflow.runtime.actors import redis_broker
from sealflow.runtime.facade import Runtime
from sealflow.runtime.liveness import BrokerUnavailable


def test_given_a_queued_run_when_the_broker_is_lost_during_start_then_start_says_so_and_serve_sends_it_again(
        tmp_path, registry):
    @action("t.work", registry=registry)
    def work(ctx):
        return {"ok": True}

    plan = make_plan(S("a", "action", action="t.work"), S("b", "action", action="t.work"))
    url = f"sqlite:///{tmp_path}/state.db"
    redis = PrivateRedis(tmp_path, start=False)
    # Given a run queued on the store (its first message due in the outbox)
    with Runtime(url, registry) as submitter:
        run_id = submitter.submit(plan, {}, initiator="u")
    rt = Runtime(url, registry, broker=redis_broker(redis.url), queue_name="q_" + uuid.uuid4().hex,
                 redeliver_after=3600)
    stop = threading.Event()
    serving = threading.Thread(target=lambda: None)
    try:
        # When a worker's runtime starts while its broker is unreachable
        with pytest.raises(BrokerUnavailable, match=f"sending step 'a' of run {run_id} to the broker failed: "
                                                    "ConnectionError"):
            rt.start()
        lost = BrokerUnavailable("lost at start")
        # Then, once the broker is back and the runtime serves with that loss noted, the run completes: the
        # message its recovery took from the outbox is sent again at once (redeliver_after is an hour)
        redis.start()
        serving = threading.Thread(target=rt.serve, args=(stop,), kwargs={"allow_open": True, "broker_lost": lost})
        serving.start()
        deadline = time.monotonic() + 30
        while rt.store.get_run(run_id).state != "completed":
            assert time.monotonic() < deadline, rt.store.get_run(run_id).state
            time.sleep(0.1)
    finally:
        stop.set()
        serving.join(timeout=30)
        rt.close(grace=1)
        redis.close()
