"""Notification deliveries as the store keeps them (:mod:`sealflow.operations.notifications`).

A :class:`NewDelivery` rides on the :class:`~sealflow.store.changes.Commit` that opens an approval
gate and is written in the same transaction (the outbox pattern: no gate without its notifications, no
notification of a gate that never opened). A deliverer then takes due rows (:meth:`Store.take_deliveries`,
leased so that two deliverers never post the same row at once) and settles each: ``delivered``, due again
later (``pending``), or dead-lettered (``failed``, audited as ``notification_failed``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: a delivery's states: waiting to be (re)posted, posted with a 2xx answer, given up after its attempts
DELIVERY_STATES = ("pending", "delivered", "failed")


@dataclasses.dataclass(frozen=True, slots=True)
class NewDelivery:
    """One delivery to write with a commit: ``id`` is also the ``webhook-id`` the receiver deduplicates by."""

    id: str
    channel: str
    kind: str
    step_id: str
    tenant: str
    payload: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class DeliveryRecord:
    id: str
    channel: str
    kind: str
    run_id: str
    step_id: str
    tenant: str
    payload: dict[str, Any]
    state: str
    attempts: int
    next_at: float
    created_at: float
    updated_at: float
    #: why the last attempt failed (a status code or an error class: never a response body, never a URL)
    last_error: str | None = None
