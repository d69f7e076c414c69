"""A replaced attempt knows it: the lease watch behind ``ctx.cancelled()``."""

from __future__ import annotations

import dataclasses

from sealflow.core.clock import FakeClock
from sealflow.execution import leasewatch
from sealflow.execution.leasewatch import LeaseWatch


@dataclasses.dataclass
class Att:
    run_id: str = "run_1"
    step_id: str = "one"
    attempt: int = 1
    token: int = 8
    lease_expires: float | None = None
    state: str = "running"


class Store:
    def __init__(self, current):
        self.current = current

    def active_attempt(self, run_id):
        if isinstance(self.current, Exception):
            raise self.current
        return self.current


def test_the_lease_is_lost_once_its_expiry_passes():
    clock = FakeClock()
    watch = LeaseWatch(Store(Att()), clock, Att(lease_expires=clock.now() + 5))
    assert not watch.lost()
    clock.advance(5)
    assert watch.lost()


def test_the_lease_is_lost_once_the_store_says_the_attempt_moved_on(monkeypatch):
    monkeypatch.setattr(leasewatch, "RECHECK_S", 0.0)
    clock = FakeClock()
    mine = Att(lease_expires=clock.now() + 60)
    store = Store(Att())
    watch = LeaseWatch(store, clock, mine)
    assert not watch.lost()  # still ours
    store.current = RuntimeError("database is locked")
    assert not watch.lost()  # cannot tell: not lost
    store.current = Att(token=9)  # the sweeper handed it on under a new token
    assert watch.lost()
    store.current = Att()
    assert watch.lost()  # lost for good
    for moved in (None, Att(state="failed"), Att(attempt=2)):
        other = LeaseWatch(Store(moved), clock, mine)
        assert other.lost()
