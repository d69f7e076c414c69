"""The store's clock, injected once (open_store(url, clock=...)): the definition registry reads it instead of
taking a ``now``; a Runtime keeps time on its store's clock and refuses another one given beside it."""

from __future__ import annotations

import pytest

from sealflow.core.clock import SYSTEM, FakeClock
from sealflow.core.errors import ConfigError
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store


def test_given_a_store_on_a_fake_clock_when_definitions_are_recorded_and_marked_then_they_carry_its_time(
        store, clock):
    # Given a store opened on the test's fake clock (the store fixture)
    assert store.clock is clock
    # When a definition is recorded, the clock moves, and it is recorded again, then refused by an executor
    store.register_definition("wf", 1, "d1", "ana@example.com")
    clock.advance(30)
    again = store.register_definition("wf", 1, "d1", "ana@example.com")
    changed = store.mark_definition("wf", 1, "d1", refused="bad signature", actor="worker:1")
    # Then its first and last sightings are the clock's times, and the mark is audited at the clock's now
    assert (again.first_seen, again.last_seen, again.loads) == (clock.now() - 30, clock.now(), 2)
    assert changed
    (event,) = [e for e in store.audit() if e.event == "definition.untrusted"]
    assert event.ts == clock.now()


def test_given_a_store_url_and_a_clock_when_a_runtime_opens_it_then_the_store_keeps_that_clock(tmp_path):
    # Given a fake clock / When a Runtime opens a store by URL with it
    clock = FakeClock()
    rt = Runtime(f"sqlite:///{tmp_path}/a.db", clock=clock)
    try:
        # Then the runtime and its store keep time on that one clock
        assert rt.clock is clock and rt.store.clock is clock
    finally:
        rt.close()
        rt.store.close()


def test_given_a_store_alone_when_a_runtime_is_made_then_it_keeps_the_store_s_clock(tmp_path):
    # Given a store opened on a fake clock
    clock = FakeClock()
    store = open_store(f"sqlite:///{tmp_path}/b.db", clock=clock)
    # When a Runtime is given the store alone
    rt = Runtime(store)
    try:
        # Then it keeps time on the store's clock
        assert rt.clock is clock
    finally:
        rt.close()
        store.close()


def test_given_a_store_on_one_clock_when_a_runtime_is_given_another_then_it_is_refused_plainly(tmp_path):
    # Given a store on the system's clock
    store = open_store(f"sqlite:///{tmp_path}/c.db")
    try:
        assert store.clock is SYSTEM
        # When a Runtime is given that store and a fake clock / Then it is refused, saying how to open the store
        with pytest.raises(ConfigError, match=r"open_store\(url, clock=clock\)"):
            Runtime(store, clock=FakeClock())
    finally:
        store.close()
