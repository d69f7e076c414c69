"""A worker process for the cross-process fan-out tests (run by test_fanout_processes.py).

``python fanout_worker.py URL WORLD_DB MODE N CONCURRENCY``: with MODE ``submit`` it first submits one run of a
map over N items (``i0``..) at CONCURRENCY, then (both modes) works, dispatches and sweeps until a top-level run
is in the store and final. The action (fanout_helpers.World) records intervals and effects in WORLD_DB. With
``FAN_HANG=LABEL`` the action of that item writes ``FAN_MARKER`` and sleeps, for the test to SIGKILL this process.
"""

from __future__ import annotations

import sys

from fanout_helpers import World, map_of
from interp_helpers import serve_until

from sealflow.core.states import RUN_FINAL
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store


def main(url: str, db: str, mode: str, n: int, concurrency: int) -> None:
    world = World(db)
    rt = Runtime(open_store(url), world.registry, {}, worker_threads=3, worker_timeout_ms=20)
    if mode == "submit":
        rt.submit(map_of("input.items", concurrency=concurrency, retry=2), {"items": [f"i{k}" for k in range(n)]},
                  initiator="user:ana")

    def all_final() -> bool:
        tops = [r for r in rt.store.list_runs(limit=1000) if r.parent_run_id is None]
        return bool(tops) and all(r.state in RUN_FINAL for r in tops)

    serve_until(rt, all_final, dead_owner_check=0.2, heartbeat_every=0.2, dead_after=1.5)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
