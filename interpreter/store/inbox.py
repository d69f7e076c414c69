"""The event inbox: events offered to runs that wait for them (a ``wait: {event: ...}`` step).

Every event a configured source delivers (``POST /v1/events/{source}``) is kept here, by tenant, for the runtime's
``events.keep`` window, so that a run reaching its wait *after* the event arrived still finds it (no lost race):
the wait looks here first, then waits. Kept once per (tenant, source, event id): a delivery repeated under the same
id is one event. The sweeper drops events older than the window.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

#: how long an event is kept for waits that reach it later, by default (seconds): an hour
DEFAULT_KEEP_S = 3600.0
#: the most events a wait looks through when it starts (the oldest first)
FIND_LIMIT = 200


#: how many waiting runs one read of :meth:`EventInbox.inbox_waiting` returns
WAITING_PAGE = 500


@dataclasses.dataclass(frozen=True, slots=True)
class InboxEvent:
    """An event as a wait sees it: ``event.id``, ``event.type``, ``event.source``, ``event.data``."""

    tenant: str
    source: str
    id: str
    type: str
    data: Any
    received_at: float

    def as_value(self) -> dict[str, Any]:
        """The ``event`` of a wait's ``match`` expression."""
        return {"id": self.id, "type": self.type, "source": self.source, "data": self.data}


@runtime_checkable
class EventInbox(Protocol):
    """The events kept for waits (this module)."""

    def inbox_put(self, event: InboxEvent) -> bool:
        """Keep ``event``; False when its (tenant, source, id) is kept already (a repeated delivery)."""
        ...

    def inbox_find(self, tenant: str, type: str, source: str | None, since: float,
                   limit: int = FIND_LIMIT) -> list[InboxEvent]:
        """The events of ``tenant`` of ``type`` (from ``source``; None: any) received at ``since`` or later, oldest
        first, at most ``limit``."""
        ...

    def inbox_prune(self, before: float) -> int:
        """Drop the events received before ``before``; how many were dropped."""
        ...

    def inbox_waiting(self, tenant: str, type: str, *, after: str = "", limit: int = WAITING_PAGE
                      ) -> list[tuple[str, str]]:
        """``(run id, step id)`` of ``tenant``'s runs whose current attempt waits for an event of ``type`` (maybe
        a few more: the caller checks each), by run id, those after run ``after``, at most ``limit``: page
        through them all, never only the first ten thousand waiting runs."""
        ...
