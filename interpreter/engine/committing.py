"""The one commit-retry loop: build a commit, apply it, build again after a revision conflict.

Every writer of the engine layer (a step's outcome, an approval decision, a compensation attempt, the
start of compensation on cancel or deadline) commits through :func:`commit_retrying`: the commit is
built from what was read, applied fenced by the attempt's token and the run's revision, and on a
:class:`~sealflow.interpreter.store.errors.ConcurrencyError` (an operator or a worker moved the run
meanwhile) ``conflict()`` re-reads and the commit is built again. What a fencing failure means (a late
result: nothing to do; an approval that moved on: tell the caller) is the caller's ``fenced``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sealflow.interpreter.core.clock import Clock
from sealflow.interpreter.store.base import Commit, Store
from sealflow.interpreter.store.errors import ConcurrencyError, FencingError, IllegalTransition
from sealflow.interpreter.store.records import Committed

#: how often a commit is built again after revision conflicts before giving up
TRIES = 8

T = TypeVar("T")


class Again:
    """Returned by a ``fenced`` handler: look again (build anew) instead of giving up."""


AGAIN = Again()


def commit_retrying(store: Store, clock: Clock, build: Callable[[], Commit | None], *,
                    conflict: Callable[[], None] = lambda: None,
                    fenced: Callable[[FencingError], object] | None = None,
                    illegal: Callable[[IllegalTransition], object] | None = None,
                    gave_up: str | None = None) -> Committed | None:
    """Apply ``build()`` (None: nothing to commit, returns None), rebuilding after each revision conflict.

    ``fenced(exc)`` / ``illegal(exc)`` handle those failures (they may raise; returning :data:`AGAIN`
    retries, anything else ends with None); without a handler the error propagates. After :data:`TRIES`
    conflicts: ``ConcurrencyError(gave_up)``, or None when ``gave_up`` is None.
    """
    for _ in range(TRIES):
        commit = build()
        if commit is None:
            return None
        try:
            return store.commit(commit, clock.now())
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
