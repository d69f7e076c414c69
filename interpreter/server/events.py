"""Signed events from a webhook provider (``POST /v1/events/{source}``) starting ``trigger.event`` definitions.

Each source is configured in the runtime configuration's ``events:`` section with the secret it signs with
(a secret *reference*, never the value), the tenant its runs belong to, and optionally its own tolerance::

    events:
      tolerance: 300                 # seconds a delivery's timestamp may be off (default 300)
      sources:
        crm:
          secret: {secret: CRM_WEBHOOK_SECRET}   # "whsec_<base64>", as Standard Webhooks providers issue
          tenant: acme

A delivery is verified per `Standard Webhooks <https://www.standardwebhooks.com>`_: the ``webhook-id``,
``webhook-timestamp`` and ``webhook-signature`` headers; the signature is HMAC-SHA256 over
``{id}.{timestamp}.{body}`` with the base64-decoded secret, compared in constant time; a timestamp outside the
tolerance (past or future) is refused, so a captured delivery cannot be replayed later. The body is
``{"type": ..., "data": {...}}``: ``data`` is the run's input.

Then, in this order: a delivery whose id was answered before gets that first answer again (deduplication);
every definition whose ``trigger.event`` names this ``type`` (and this source, when it names one) is
considered at its latest trusted version (:func:`sealflow.server.submitting.resolve`);
its ``filter`` decides whether the event applies; with ``order: {key, sequence}`` an event whose sequence is
not newer than the one already applied for its key is recorded (``out_of_order``) and not run; otherwise a
run starts as the trigger's ``run_as`` with the event's data as input (validated against the input schema),
idempotent by the event id. Then the event is kept in the source's tenant's event inbox and offered to the runs
that wait for it (``wait: {event: ...}``, :mod:`sealflow.runtime.hearing`): ``waiting`` in the answer lists each
run that took it or refused it (its data failed the wait's schema). The answer lists what happened per definition
and is recorded under the id.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

from sealflow.core import webhooks
from sealflow.core.errors import ConfigError
from sealflow.dsl.expressions import compile_cached, evaluate, truthy
from sealflow.store.serverstate import SignedEvents

DEFAULT_TOLERANCE_S = 300.0
MAX_ID = 256


class EventRefused(Exception):
    """A delivery is refused: ``kind`` is the API problem type (the message says what is wrong)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclasses.dataclass(frozen=True)
class Source:
    name: str
    secret_name: str
    tenant: str
    tolerance: float


def sources(config: Any) -> dict[str, Source]:
    """The configured event sources (``events.sources``) of a :class:`RuntimeConfig` or a mapping;
    :class:`ConfigError` naming the key when the section is invalid (``sealflow serve`` checks it at start)."""
    extra: Mapping[str, Any] = getattr(config, "extra", config) or {}
    where_file = getattr(config, "source", None) or "the runtime configuration"
    section = extra.get("events") or {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{where_file}: events: expected a mapping with sources:")
    tolerance = _seconds(section.get("tolerance", DEFAULT_TOLERANCE_S), f"{where_file}: events.tolerance")
    from sealflow.steps.wait import keep_seconds

    try:
        keep_seconds(extra)  # how long events are kept for the runs that wait for them
    except ValueError as exc:
        raise ConfigError(f"{where_file}: {exc}") from None
    raw_sources = section.get("sources") or {}
    if not isinstance(raw_sources, Mapping):
        raise ConfigError(f"{where_file}: events.sources: expected a mapping of source names")
    found: dict[str, Source] = {}
    for name, raw in raw_sources.items():
        where = f"{where_file}: events.sources.{name}"
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where}: expected a mapping with secret: and tenant:")
        ref = raw.get("secret")
        if not isinstance(ref, Mapping) or not isinstance(ref.get("secret"), str):
            raise ConfigError(f"{where}.secret: write secret: {{secret: NAME}} (a secret reference; an inline "
                              "secret is refused)")
        found[str(name)] = Source(str(name), ref["secret"], str(raw.get("tenant", "default")),
                                  _seconds(raw.get("tolerance", tolerance), f"{where}.tolerance"))
    return found


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86_400:
        raise ConfigError(f"{where}: a number of seconds between 0 and 86400, not {value!r}")
    return float(value)


def secret_key(value: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret (``whsec_`` + base64; the prefix is optional)."""
    try:
        return webhooks.decode_secret(value)
    except ValueError:
        raise EventRefused("internal", "the source's secret is not whsec_<base64>") from None


def sign(secret: str, event_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value (``v1,<base64>``) of a delivery."""
    return webhooks.signature(secret_key(secret), event_id, timestamp, body)


def verify(secret: str, headers: Mapping[str, str], body: bytes, *, now: float, tolerance: float) -> tuple[str, int]:
    """Check a delivery's Standard Webhooks headers; return ``(event id, timestamp)`` or raise EventRefused."""
    event_id, stamp, signatures = (headers.get("webhook-id"), headers.get("webhook-timestamp"),
                                   headers.get("webhook-signature"))
    if not event_id or not stamp or not signatures:
        raise EventRefused("unauthenticated", "missing webhook-id, webhook-timestamp or webhook-signature header")
    if len(event_id) > MAX_ID:
        raise EventRefused("invalid-request", f"webhook-id is longer than {MAX_ID} characters")
    try:
        timestamp = int(stamp)
    except ValueError:
        raise EventRefused("unauthenticated", "webhook-timestamp is not an integer (seconds since the epoch)") \
            from None
    if abs(now - timestamp) > tolerance:
        raise EventRefused("unauthenticated", f"webhook-timestamp is {now - timestamp:+.0f} s from now, outside the "
                                              f"{tolerance:.0f} s tolerance: a late or replayed delivery is refused")
    expected = sign(secret, event_id, timestamp, body).split(",", 1)[1].encode()
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        # compared as bytes: a header may carry any byte (read as Latin-1), and compare_digest refuses str
        # holding non-ASCII characters with a TypeError, which would answer a forged header with a 500
        if version == "v1" and hmac.compare_digest(value.encode("utf-8", "replace"), expected):
            return event_id, timestamp
    raise EventRefused("unauthenticated", "no webhook-signature matches the body signed with this source's secret")


def parse_body(body: bytes) -> tuple[str, Any]:
    """``(type, data)`` of a delivery body."""
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise EventRefused("invalid-request", f"the body is not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("type"), str) or not doc["type"]:
        raise EventRefused("invalid-request", 'the body must be {"type": "...", "data": {...}}')
    return doc["type"], doc.get("data", {})


def receive(rt: Any, trust: Any, source_name: str, headers: Mapping[str, str],
            body: bytes) -> tuple[dict[str, Any], bool]:
    """Verify and apply one delivery; return ``(answer, duplicate)``. Raises :class:`EventRefused`."""
    source = sources(rt.config).get(source_name)
    if source is None:
        raise EventRefused("not-found", f"no event source {source_name!r} is configured (events.sources)")
    from sealflow.execution import secrets

    try:
        secret = secrets.chain_for(rt.config).resolve([source.secret_name])[source.secret_name]
    except Exception:  # noqa: BLE001 - a missing secret is the operator's to fix, never the caller's to see
        raise EventRefused("internal", f"event source {source_name!r}: its secret {source.secret_name} is not "
                                       "available") from None
    event_id, _ = verify(secret, headers, body, now=time.time(), tolerance=source.tolerance)
    store: SignedEvents = rt.signed_events()  # the server's signed events, kept in the runtime's store object
    seen = store.event_answer(source.name, event_id)
    if seen is not None:
        return seen, True
    event_type, data = parse_body(body)
    results = [_apply(rt, trust, source, event_id, data, plan) for plan in _subscribers(rt, trust, source, event_type)]
    # then the runs of the source's tenant that wait for it (wait: {event: ...}); kept for those that come later
    offered = [o.as_dict() for o in rt.offer_event(source.tenant, source.name, event_id, event_type, data)]
    answer = {"id": event_id, "source": source.name, "type": event_type, "results": results, "waiting": offered}
    recorded = store.record_event(source.name, event_id, answer, rt.clock.now())
    return recorded, recorded is not answer


def _subscribers(rt: Any, trust: Any, source: Source, event_type: str) -> list[Any]:
    """The latest trusted plan of every definition with a ``trigger.event`` for this type and source."""
    from sealflow.server.schemas import SubmitRequest
    from sealflow.server.submitting import resolve

    if trust is not None:
        names = sorted({d.name for d in rt.definitions() if d.active})
    else:
        names = sorted({name for name, _, _, _ in rt.stored_plans()})
    found = []
    for name in names:
        try:
            resolved = resolve(rt, SubmitRequest(workflow=name), trust, "events")
        except Exception:  # noqa: BLE001 - a definition that cannot be resolved is not a subscriber
            continue
        plan = resolved.plan
        event = plan.trigger.event if plan.trigger is not None else None
        if event and event.get("type") == event_type and event.get("source") in (None, source.name):
            found.append(resolved)
    return found


def _apply(rt: Any, trust: Any, source: Source, event_id: str, data: Any, resolved: Any) -> dict[str, Any]:
    plan = resolved.plan
    event = plan.trigger.event
    result: dict[str, Any] = {"workflow": plan.name, "version": plan.version}
    context = {"input": data}
    try:
        if event.get("filter") and not truthy(evaluate(compile_cached(event["filter"]), context)):
            return {**result, "result": "filtered"}
        order = event.get("order")
        if order:
            key = evaluate(compile_cached(order["key"]), context)
            sequence = evaluate(compile_cached(order["sequence"]), context)
            if not isinstance(sequence, int) or isinstance(sequence, bool):
                return {**result, "result": "refused", "error": f"order.sequence is {sequence!r}, not an integer"}
            store: SignedEvents = rt.signed_events()
            applied = store.apply_sequence(f"{source.name}/{plan.name}", json.dumps(key), sequence, event_id,
                                              rt.clock.now())
            if applied is not None:
                return {**result, "result": "out_of_order", "sequence": sequence, "applied": applied}
    except Exception as exc:  # noqa: BLE001 - an expression error refuses this definition, not the delivery
        return {**result, "result": "refused", "error": str(exc)}
    if not event.get("run_as"):
        return {**result, "result": "refused", "error": f"{plan.name} v{plan.version}: its trigger.event names no "
                                                        "run_as, so no run can start"}
    try:
        run_id = rt.submit(plan, data, initiator=f"event:{source.name}", tenant=source.tenant,
                           idempotency_key=f"event:{source.name}:{event_id}", run_as=event["run_as"],
                           signer=resolved.signer, source=resolved.source)
    except Exception as exc:  # noqa: BLE001 - unauthorised, invalid input, admission: the answer says which
        return {**result, "result": "refused", "error": getattr(exc, "message", None) or str(exc)}
    return {**result, "result": "started", "run_id": run_id}
