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
from sealflow.execution.context import Execution
from sealflow.steps.sections import section


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


def execute(x: Execution) -> Outcome:
    fire_at = x.attempt.data.get("fire_at")
    if x.resumed and fire_at is not None:
        return Succeeded({"until": fire_at})
    spec = section(x, x.step.wait, "wait")
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
