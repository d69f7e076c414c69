"""The deterministic simulator (tests/simulation/sim.py) over SQLite and PostgreSQL: seeded schedules of
runs, faults at every numbered point of an attempt, duplicated and reordered messages, lease expiries, clock
jumps, store errors and paused workers; after each, the invariants. A failure names its seed:
``SEALFLOW_SIM_SEED=N python -m pytest -q tests/simulation`` replays it exactly.

Size: a bounded number in the default suite (CI), 100,000 schedules with ``-m simulation``, any with
``SEALFLOW_SIM_SCHEDULES=N`` (tests/simulation/conftest.py).
"""

from __future__ import annotations

import shutil
import time
from collections import Counter

import pytest
from sim import World, clock_for, compile_plans, run_schedule
from simsize import sim_seeds

from sealflow.store import open_store

pytestmark = pytest.mark.simulation


def _report(backend: str, seeds: list[int], totals: Counter, started: float) -> None:
    print(f"\nsimulation ({backend}): {len(seeds)} schedules from seed {seeds[0]}; "
          + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())) + f"; {time.monotonic() - started:.1f} s")


@pytest.fixture(scope="module")
def plans():
    world = World.__new__(World)  # only its action declarations are needed
    from sealflow.execution.actions import Registry

    world.registry = Registry()
    World._actions(world)
    return compile_plans(world.action_infos())


def test_given_seeded_schedules_on_sqlite_then_every_invariant_holds(request, tmp_path, plans):
    # Given a migrated SQLite store, copied afresh for each schedule
    template = tmp_path / "template.db"
    open_store(f"sqlite:///{template}").close()
    seeds = sim_seeds(request.config, "sqlite")
    totals: Counter = Counter()
    started = time.monotonic()
    for seed in seeds:
        path = tmp_path / "state.db"
        for suffix in ("", "-wal", "-shm"):
            (tmp_path / f"state.db{suffix}").unlink(missing_ok=True)
        shutil.copy(template, path)
        store = open_store(f"sqlite:///{path}", clock=clock_for(seed))
        try:
            # When schedule `seed` runs, Then its invariants hold (check raises naming the seed otherwise)
            counts, _ = run_schedule(store, seed, tenant="sim", plans=plans)
        finally:
            store.close()
        totals.update(counts)
    _report("sqlite", seeds, totals, started)
    assert totals["runs"] >= len(seeds)


def test_given_seeded_schedules_on_postgres_then_every_invariant_holds(request, pg_schema, plans):
    # Given a PostgreSQL store on its database's clock... no: on the caller's (the simulation's) clock, opened
    # on each schedule's own
    seeds = sim_seeds(request.config, "postgres")
    totals: Counter = Counter()
    started = time.monotonic()
    for seed in seeds:
        store = open_store(pg_schema.url(clock="caller", migrate="1", pool_max="4"), clock=clock_for(seed))
        try:
            # each schedule in a tenant of its own: its audit chain is verified alone
            counts, _ = run_schedule(store, seed, tenant=f"sim{seed}", plans=plans)
        finally:
            store.close()
        totals.update(counts)
    _report("postgres", seeds, totals, started)
    assert totals["runs"] >= len(seeds)


def test_a_schedule_replays_exactly(tmp_path, plans):
    # Given one seed, When it runs twice on fresh stores, Then the same events happen in the same order
    traces = []
    for name in ("a", "b"):
        store = open_store(f"sqlite:///{tmp_path / name}.db", clock=clock_for(4242))
        try:
            counts, trace = run_schedule(store, 4242, tenant="sim", plans=plans)
        finally:
            store.close()
        traces.append((counts, [line for line in trace]))
    assert traces[0] == traces[1]
