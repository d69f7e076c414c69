"""Optional store capabilities (interpreter/store/capabilities.py): each backend declares the ones it implements,
they are decided once when the engine is built, and a store lacking them is served as before (no heartbeats,
polling, no reservations, no run counts), never probed with ``hasattr``."""

from __future__ import annotations

import dataclasses
import random
import threading

import pytest
from interp_helpers import BACKENDS

from sealflow.core.clock import FakeClock
from sealflow.engine.recovery import expire_dead_owners
from sealflow.execution.actions import Registry
from sealflow.execution.context import Services
from sealflow.runtime import liveness
from sealflow.runtime.telemetry.metrics import Metrics
from sealflow.store.capabilities import (
    Capabilities,
    Heartbeats,
    SqlReads,
    UsageReservations,
    WorkNotification,
)
from sealflow.store.postgres.store import PostgresStore

#: backend -> the capabilities it declares
DECLARED = {
    "sqlite": {"usage_reservations", "sql_reads"},
    "postgres": {"heartbeats", "work_notification", "usage_reservations", "sql_reads"},
}
PROTOCOLS = {"heartbeats": Heartbeats, "work_notification": WorkNotification,
             "usage_reservations": UsageReservations, "sql_reads": SqlReads}


def test_every_backend_of_the_suite_has_its_row():
    # Given the backends the store suite runs on, Then each has its declared capabilities pinned here
    assert set(DECLARED) == set(BACKENDS)
    assert set(PROTOCOLS) == {f.name for f in dataclasses.fields(Capabilities)}


def test_given_a_backend_when_its_capabilities_are_decided_then_they_are_the_ones_it_implements(store):
    # Given a store of each backend
    backend = "postgres" if isinstance(store, PostgresStore) else "sqlite"
    # When its capabilities are decided
    caps = Capabilities.of(store)
    # Then it declares exactly the pinned ones, each field being the store itself, typed as the capability
    assert set(caps.names()) == DECLARED[backend]
    for name, protocol in PROTOCOLS.items():
        held = getattr(caps, name)
        assert (held is store and isinstance(store, protocol)) if name in DECLARED[backend] else held is None


class MinimalStore:
    """A store with none of the optional capabilities (only what the calls below read)."""

    def __init__(self):
        self.expired: list[str] = []

    def lease_owners(self) -> list[str]:
        return ["elsewhere:1:gone"]  # another host's worker: not judged by pid here

    def expire_leases(self, owner: str, now: float, why: str) -> int:
        self.expired.append(owner)
        return 1

    # what the metrics' collector reads of every store
    def dead_letters(self, include_redriven: bool = False) -> list:
        return []

    def breakers(self) -> list:
        return []

    def outbox(self) -> list:
        return []


class HalfHeartbeats(MinimalStore):
    """Beats but cannot name dead workers: not the Heartbeats capability (a capability is declared whole)."""

    def heartbeat(self, owner: str, broker_id: str | None = None) -> None:
        raise AssertionError("never called: the store does not declare heartbeats")


def _services(store) -> Services:
    return Services(store, Registry(), lambda name: None, FakeClock(), None, random.Random(1),  # type: ignore[arg-type]
                    lambda run_id: False)


def test_given_a_store_lacking_every_capability_then_none_is_declared_and_each_caller_does_without():
    # Given a minimal store, and one with only part of the heartbeat capability
    store, half = MinimalStore(), HalfHeartbeats()
    # When the engine's services are built on them
    caps, half_caps = _services(store).capabilities, _services(half).capabilities
    # Then neither declares any capability
    assert caps == half_caps == Capabilities() and caps.names() == ()
    # And no heartbeat is sent or started
    beats = liveness.Heartbeats(half_caps.heartbeats, "me:1:x")
    beats.begin()
    assert not beats.beats.enabled and not beats.is_alive()
    # And the worker loop polls (it waits the interval on its stop event, no wake-ups asked for)
    stop = threading.Event()
    stop.set()
    liveness.wait_for_work(caps.work_notification, stop, 5.0)
    # And no silent worker's messages are requeued
    assert liveness.requeue_silent(caps.heartbeats, object(), 15.0) == 0
    # And dead workers are judged by pid on this host, even given a silence limit (another host's: kept)
    assert expire_dead_owners(store, 0.0, "me:1:x", silent_for=5.0, heartbeats=caps.heartbeats) == 0
    assert store.expired == []
    # And the metrics leave out the runs by state (no raw reads), the other families still collected
    families = {f.name for f in Metrics(store).registry.collect()}
    assert "sealflow_runs" not in families and "sealflow_dead_letters" in families


def test_given_services_built_then_the_capabilities_are_decided_once():
    # Given services built on a store without wake-ups
    store = MinimalStore()
    services = _services(store)
    # When the store gains the method afterwards
    store.wait_for_work = lambda timeout: True  # type: ignore[attr-defined]
    # Then the record decided at build time stands (it is not probed again), and it is read-only
    assert services.capabilities.work_notification is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        services.capabilities.work_notification = store  # type: ignore[misc]


def test_given_a_runtime_then_it_reads_the_engines_record(runtime):
    # Given a runtime (the embedded SQLite store unless the engine tests run on PostgreSQL)
    # When its capabilities are read, Then they are the engine's, decided once for its store
    assert runtime.capabilities is runtime.engine.services.capabilities
    assert runtime.capabilities == Capabilities.of(runtime.store)
