"""``wait``: a durable timer (``for_ms``, or ``until`` a timestamp); no worker is held meanwhile.

``until`` gives epoch seconds (a number, e.g. ``now() + duration('2h')``) or
an ISO-8601 string (a time without an offset is UTC). A time already past
succeeds at once. Otherwise the attempt goes ``waiting`` with a ``wait`` timer
in the store; when it fires, a worker claims the attempt again and it succeeds.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sealflow.core.outcomes import Failed, Outcome, Succeeded, Waiting
from sealflow.dsl import expressions
from sealflow.dsl.durations import format_ms
from sealflow.dsl.plan import WaitPlan
from sealflow.execution import schemacheck
from sealflow.execution.context import Execution
from sealflow.steps.sections import section
from sealflow.store.inbox import DEFAULT_KEEP_S, InboxEvent

#: the most seconds events may be kept for waits (``events.keep``): 30 days
KEEP_MAX_S = 30 * 86_400.0
#: an offer's verdicts
TAKEN, UNMATCHED, REFUSED = "taken", "unmatched", "refused"
#: a wait for an event looks in the inbox again this long after it began waiting (attempt data: :data:`RECHECK`)
RECHECK_S = 1.0
RECHECK = "recheck"


def to_epoch(value: Any) -> float:
    """Epoch seconds from a number or an ISO-8601 string; ValueError with a hint otherwise."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"wait.until gave {value!r}; give epoch seconds or an ISO-8601 string")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            pass
        try:
            moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValueError(f"wait.until gave {value!r}, which is not an ISO-8601 timestamp such as "
                             "'2030-01-31T09:00:00Z'") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
        return moment.timestamp()
    raise ValueError(f"wait.until gave a {type(value).__name__}; give epoch seconds or an ISO-8601 string")


def keep_seconds(config: Any) -> float:
    """How long events are kept for waits (``events.keep`` in the runtime configuration, seconds; default an
    hour); ValueError naming the key when it is not a number of seconds between 0 and 30 days."""
    extra = getattr(config, "extra", config) or {}
    section_ = extra.get("events") if isinstance(extra, dict) else None
    value = (section_ or {}).get("keep", DEFAULT_KEEP_S) if isinstance(section_, dict) or section_ is None else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= KEEP_MAX_S:
        raise ValueError(f"events.keep: a number of seconds between 0 and {int(KEEP_MAX_S)} (30 days), not {value!r}")
    return float(value)


def offer(x: Execution, spec: WaitPlan, event: InboxEvent) -> tuple[str, str | None]:
    """Whether the waiting step ``x`` takes ``event``: (:data:`TAKEN`, None), (:data:`UNMATCHED`, why) when it is
    not for this run (its source, or ``match`` false), (:data:`REFUSED`, why) when it matches but its data fails the
    wait's ``schema``."""
    if event.type != spec.event or (spec.source is not None and event.source != spec.source):
        return UNMATCHED, "another type or source"
    if spec.match is not None:
        context = {**x.context, "event": event.as_value()}
        try:
            matched = expressions.truthy(expressions.evaluate(expressions.compile_cached(spec.match), context,
                                                              clock=x.services.clock.now))
        except expressions.EvaluationError as exc:
            return UNMATCHED, f"match could not be evaluated on it: {exc}"
        if not matched:
            return UNMATCHED, "match is false"
    broken = schemacheck.problem(x, spec.event_schema, event.data, "event_schema")
    if broken is not None:
        return REFUSED, f"event {event.id} ({event.type}) data {broken}"
    return TAKEN, None


def taken(x: Execution, event: InboxEvent) -> Succeeded:
    """The step's success with ``event``: its data is the output; the event is named in the audit (which is also
    how the run knows not to take it again)."""
    return Succeeded(event.data, detail={"event": {"id": event.id, "source": event.source, "type": event.type}})


def taken_before(x: Execution) -> set[tuple[str, str]]:
    """The (source, id) of every event this run has taken (audited ``step.detail`` with an ``event``)."""
    out: set[tuple[str, str]] = set()
    for record in x.services.store.audit(x.run.id, event="step.detail"):
        got = record.detail.get("event") if isinstance(record.detail, dict) else None
        if isinstance(got, dict):
            out.add((str(got.get("source")), str(got.get("id"))))
    return out


def _for_event(x: Execution, spec: WaitPlan) -> Outcome:
    timeout_ms = spec.timeout_ms or 0
    data = x.attempt.data
    if x.resumed and not data.get(RECHECK):  # the wait's timer claimed it back: no event was taken in time
        source = f" from {spec.source}" if spec.source else ""
        return Failed("timeout", f"no {spec.event} event{source} was taken by step {x.step.id!r} within "
                                 f"{format_ms(timeout_ms)}", no_retry=True)
    try:
        keep = keep_seconds(x.services.config)
    except ValueError as exc:
        return Failed("configuration", str(exc))
    seen = taken_before(x)
    for event in x.services.store.inbox_find(x.run.tenant or "", spec.event or "", spec.source, x.now - keep):
        if (event.source, event.id) in seen:
            continue
        verdict, _ = offer(x, spec, event)
        if verdict == TAKEN:
            return taken(x, event)
    waiting = {"event": spec.event, "source": spec.source}
    if x.resumed:  # the look again after the wait was committed: now wait for the rest of the timeout
        return Waiting(float(data.get("until") or x.now), "wait", waiting)
    # an event delivered between the look above and this wait's commit finds no run waiting yet: so the wait
    # looks once more, RECHECK_S after its commit (then every later event finds it waiting)
    until = x.now + timeout_ms / 1000.0
    return Waiting(min(x.now + RECHECK_S, until), "wait", {**waiting, RECHECK: True, "until": until},
                   event="wait.event", detail={"event": spec.event, "source": spec.source, "timeout_ms": timeout_ms})


def execute(x: Execution) -> Outcome:
    spec = section(x, x.step.wait, "wait")
    if spec.event is not None:
        return _for_event(x, spec)
    fire_at = x.attempt.data.get("fire_at")
    if x.resumed and fire_at is not None:
        return Succeeded({"until": fire_at})
    if spec.for_ms is not None:
        fire_at = x.now + spec.for_ms / 1000.0
    else:
        try:
            fire_at = to_epoch(x.evaluate(section(x, spec.until, "wait.until")))
        except ValueError as exc:
            return Failed("invalid_request", str(exc))
    if fire_at <= x.now:
        return Succeeded({"until": fire_at})
    return Waiting(fire_at, "wait", {"fire_at": fire_at})
