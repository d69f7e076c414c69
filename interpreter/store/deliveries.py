"""Notification deliveries as the store keeps them (:mod:`sealflow.operations.notifications`).

A :class:`NewDelivery` rides on the :class:`~sealflow.store.changes.Commit` that opens an approval
gate and is written in the same transaction (the outbox pattern: no gate without its notifications, no
notification of a gate that never opened). A deliverer then takes due rows (:meth:`Store.take_deliveries`,
leased so that two deliverers never post the same row at once) and settles each: ``delivered``, due again
later (``pending``), or dead-lettered (``failed``, audited as ``notification_failed``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

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


@runtime_checkable
class Deliveries(Protocol):
    """Notification deliveries (one aggregate of the store): taken leased, settled, retried, listed."""

    def take_deliveries(self, limit: int = 50, lease: float = 60.0) -> list[DeliveryRecord]:
        """Due pending deliveries (due now, on the store's clock), each counted as one more attempt and leased for
        ``lease`` seconds."""

    def settle_delivery(self, taken: DeliveryRecord, *, state: str, next_at: float | None = None,
                        error: str | None = None, actor: str = "notifier") -> bool:
        """Delivered, pending again at ``next_at`` (on the store's clock), or failed (audited), now; False if the
        row moved on meanwhile."""

    def retry_delivery(self, delivery_id: str, *, actor: str) -> DeliveryRecord | None:
        """Re-queue a failed delivery, due now (audited); the row as it was, or None for an unknown id."""

    def deliveries(self, *, state: str | None = None, run_id: str | None = None,
                   limit: int = 100) -> list[DeliveryRecord]:
        """Deliveries, newest first."""
