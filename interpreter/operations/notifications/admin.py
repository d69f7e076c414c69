"""Reading and retrying approval notification deliveries as a principal: the one place the CLI
(``sealflow notifications list|retry``) and the HTTP API (``/v1/notifications``) authorise them.

* :func:`listing`: deliveries, newest first, only those of runs ``principal`` may read (``runs:read``, or its
  own runs; an operator sees every tenant's), of ``tenant`` when one is named;
* :func:`retry`: a delivery that failed for good, pending again, due at once, its attempts counted afresh
  (audited ``notification_retried``). Its channel and receiver are the deployment's, shared by every tenant,
  so under an access policy only an operator may (:class:`~sealflow.policy.operations.OperatorOnly`).
  An unknown id is :class:`~sealflow.store.errors.NotFound`; one that is not ``failed`` (pending,
  delivered) :class:`~sealflow.store.errors.InvalidOperation`, left as it is.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sealflow.policy.access import AccessProvider
from sealflow.policy.operations import require_operator, visible_runs
from sealflow.store.base import Store
from sealflow.store.deliveries import Deliveries, DeliveryRecord
from sealflow.store.errors import InvalidOperation, NotFound


def listing(store: Store, access: AccessProvider, principal: str, *, tenant: str | None = None,
            failed: bool = False, run_id: str | None = None, limit: int = 100) -> list[DeliveryRecord]:
    """The deliveries ``principal`` may see (the principal is authorised, not the ``tenant`` it names)."""
    records = store.deliveries(state="failed" if failed else None, run_id=run_id, limit=limit)
    readable = set(visible_runs(store, access, list(dict.fromkeys(r.run_id for r in records)), tenant=tenant,
                                actor=principal))
    return [r for r in records if r.run_id in readable]


def retry(store: Deliveries, access: AccessProvider, principal: str, delivery_id: str) -> DeliveryRecord:
    """Re-queue the failed delivery ``delivery_id`` as ``principal`` (an operator); the row as it was."""
    require_operator(access, principal, "retry an approval notification")
    before = store.retry_delivery(delivery_id, actor=principal)
    if before is None:
        raise NotFound(f"no notification delivery {delivery_id!r} in this store")
    if before.state != "failed":
        raise InvalidOperation(f"delivery {delivery_id} is {before.state}, not failed: only a delivery that failed "
                               "for good is retried")
    return before


def as_dict(record: DeliveryRecord) -> dict[str, Any]:
    """A delivery as the CLI's ``--json`` and the API show it: every field but the rendered payload, and the
    gate's summary."""
    return {k: v for k, v in dataclasses.asdict(record).items() if k != "payload"} \
        | {"summary": (record.payload.get("data") or {}).get("summary")}


def retried(before: DeliveryRecord) -> dict[str, Any]:
    """What :func:`retry` did, as the CLI's ``--json`` and the API say it."""
    return {"id": before.id, "state": "pending", "channel": before.channel, "run_id": before.run_id,
            "step_id": before.step_id, "previous_attempts": before.attempts}
