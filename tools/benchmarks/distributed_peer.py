"""The peers of :mod:`tools.benchmarks.distributed`, imported by the processes it starts.

* For ``sealflow worker --actions tools.benchmarks.distributed_peer``: the no-op action ``bench.noop``.
* For ``python -m dramatiq tools.benchmarks.distributed_peer``: with ``$BENCH_PEER_NAMESPACE`` set, a bare
  Dramatiq chain of ``$BENCH_PEER_STEPS`` no-op actors on the Redis at ``$BENCH_PEER_REDIS``, with the
  middleware of Sealflow's own Redis broker (``Retries`` pinned to zero, nothing else). Each actor sends the
  next; the last pushes ``[run number, seconds since the first was sent]`` onto the list ``NAMESPACE:done``.
"""

from __future__ import annotations

import json
import os
import time

from sealflow.execution.actions import action


@action("bench.noop")
def noop(ctx):
    return None


def chain(broker, steps: int, namespace: str) -> list:
    """``steps`` no-op actors on ``broker``, each sending the next ``(run_no, sent_at)``."""
    import dramatiq

    actors: list = []

    def make(i: int):
        def fn(run_no: int, sent_at: float) -> None:
            if i + 1 < steps:
                actors[i + 1].send(run_no, sent_at)
            else:
                broker.client.rpush(f"{namespace}:done", json.dumps([run_no, time.time() - sent_at]))

        fn.__name__ = f"bench_noop_{i}"
        return dramatiq.actor(fn, broker=broker, actor_name=f"bench_noop_{i}", queue_name=f"{namespace}_chain",
                              max_retries=0)

    actors.extend(make(i) for i in range(steps))
    return actors


if os.environ.get("BENCH_PEER_NAMESPACE"):  # imported by `python -m dramatiq`: declare the broker and the chain
    import dramatiq

    from sealflow.runtime.actors import redis_broker

    _ns = os.environ["BENCH_PEER_NAMESPACE"]
    _broker = redis_broker(os.environ.get("BENCH_PEER_REDIS", "redis://127.0.0.1:6379/0"), namespace=_ns,
                           waking=False)  # Dramatiq's own RedisBroker: the peer is bare Dramatiq
    dramatiq.set_broker(_broker)
    ACTORS = chain(_broker, int(os.environ.get("BENCH_PEER_STEPS", "10")), _ns)
