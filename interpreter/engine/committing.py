"""The one commit-retry loop: build a commit, apply it, build again after a revision conflict.

Every writer of the engine layer (a step's outcome, an approval decision, a compensation attempt, the
start of compensation on cancel or deadline) commits through :func:`commit_retrying`: the commit is
built from what was read, applied fenced by the attempt's token and the run's revision, and on a
:class:`~sealflow.store.errors.ConcurrencyError` (an operator or a worker moved the run
meanwhile) ``conflict()`` re-reads and the commit is built again. What a fencing failure means (a late
result: nothing to do; an approval that moved on: tell the caller) is the caller's ``fenced``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypedDict, TypeVar

from sealflow.core.clock import Clock
from sealflow.store.base import Commit, Store
from sealflow.store.errors import ConcurrencyError, FencingError, IllegalTransition, StoreUnavailable
from sealflow.store.records import Committed

#: how often a commit is built again after revision conflicts before giving up
TRIES = 8
#: a commit the store could not take is tried again after this long, doubling to 2 s, while the attempt's lease
#: lasts (less a margin: a commit at the lease's very end is fenced off anyway), and for 10 minutes at most
RETRY_FIRST_S = 0.1
MARGIN_S = 1.0
RETRY_MAX_S = 600.0

log = logging.getLogger("sealflow.engine")

T = TypeVar("T")


class Again:
    """Returned by a ``fenced`` handler: look again (build anew) instead of giving up."""


AGAIN = Again()


def commit_retrying(store: Store, clock: Clock, build: Callable[[], Commit | None], *,
                    conflict: Callable[[], None] = lambda: None,
                    fenced: Callable[[FencingError], object] | None = None,
                    illegal: Callable[[IllegalTransition], object] | None = None,
                    unavailable: Callable[[StoreUnavailable], bool] | None = None,
                    gave_up: str | None = None) -> Committed | None:
    """Apply ``build()`` (None: nothing to commit, returns None), rebuilding after each revision conflict.

    ``fenced(exc)`` / ``illegal(exc)`` handle those failures (they may raise; returning :data:`AGAIN`
    retries, anything else ends with None); without a handler the error propagates. ``unavailable(exc)``:
    the store could not be written (nothing was); it waits and returns True to try the same commit again,
    or False to let the error propagate. After :data:`TRIES` conflicts: ``ConcurrencyError(gave_up)``, or
    None when ``gave_up`` is None.
    """
    for _ in range(TRIES):
        commit = build()
        if commit is None:
            return None
        try:
            return _apply(store, clock, commit, unavailable)
        except ConcurrencyError:
            conflict()
        except FencingError as exc:
            if fenced is None:
                raise
            if fenced(exc) is not AGAIN:
                return None
        except IllegalTransition as exc:
            if illegal is None:
                raise
            if illegal(exc) is not AGAIN:
                return None
    if gave_up is None:
        return None
    raise ConcurrencyError(gave_up)


def _apply(store: Store, clock: Clock, commit: Commit,
           unavailable: Callable[[StoreUnavailable], bool] | None) -> Committed:
    """``store.commit(commit)``, again while ``unavailable`` says to wait for the store to come back."""
    while True:
        try:
            return store.commit(commit, clock.now())
        except StoreUnavailable as exc:
            if unavailable is None or not unavailable(exc):
                raise


class _Waiting(TypedDict):
    """What :func:`outlast` keeps between failures: until when to try, and the next wait."""

    until: float | None
    delay: float


def outlast(clock: Clock, lease_end: float | None, what: str) -> Callable[[StoreUnavailable], bool]:
    """An ``unavailable`` handler for :func:`commit_retrying`: while the attempt's lease lasts (``lease_end``, on
    ``clock``), wait for a store that could not take its commit (disk full, read-only, the database away) and
    try again, so that a short outage costs the step nothing. Past it, give up: the lease runs out, the sweeper
    requeues the attempt and it runs again (a loss, not a failure: engine.poison). Waits on ``clock``."""
    state: _Waiting = {"until": None, "delay": RETRY_FIRST_S}

    def wait(exc: StoreUnavailable) -> bool:
        now = clock.now()
        until = state["until"]
        if until is None:  # first failure: the lease's time left
            left = (lease_end - now) if lease_end is not None else 0.0
            until = state["until"] = now + min(left - MARGIN_S, RETRY_MAX_S)
            log.warning("%s: the store could not take its commit (%s); trying again while its lease lasts", what, exc)
        if now + state["delay"] >= until:
            log.error("%s: the store still could not take its commit (%s); giving up: its lease will run out and "
                      "the step will run again", what, exc)
            return False
        clock.sleep(state["delay"])
        state["delay"] = min(state["delay"] * 2, 2.0)
        return True

    return wait
