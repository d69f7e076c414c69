"""Demo operations data and report archive (``metrics.query``, ``incidents.list``, ``reports.archive``).

What the weekly-report example calls. Metrics and incidents are seeded baselines
(:mod:`.seed`) varied deterministically by the week the window starts in, so the same
window always gives the same numbers and different weeks differ. ``since``/``until``
are seconds since the epoch (what ``now()`` gives) or ISO-8601 strings.
``reports.archive`` keeps a report of record: irreversible, once per
``ctx.idempotency_key``.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from sealflow.core.errors import StepError
from sealflow.demo import store
from sealflow.execution.actions import action

WEEK = 7 * 24 * 3600
SEVERITIES = ("sev1", "sev2", "sev3", "sev4")  # most severe first
DIMENSIONS = {"llm_usage": ("workflow", "model"), "workflow_runs": ("workflow", "status")}


def _seconds(value: Any, name: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    raise StepError("invalid_request", f"{name} must be seconds since the epoch or an ISO-8601 time, not {value!r}")


def _window(since: Any, until: Any) -> tuple[float, float]:
    start, end = _seconds(since, "since"), _seconds(until, "until")
    if start >= end:
        raise StepError("invalid_request", "since must be before until")
    return start, end


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _digest(*parts: Any) -> bytes:
    return hashlib.sha256("\0".join(map(str, parts)).encode()).digest()


@action("metrics.query", permissions=["metrics:read"], effect="read")
def query(ctx: Any, metric: str, since: Any, until: Any, group_by: list[Any] | None = None) -> dict[str, Any]:
    """Aggregate ``metric`` (llm_usage: calls, tokens, cost_usd; workflow_runs: runs) over the window,
    grouped by ``group_by``; returns {metric, since, until, rows, totals}. workflow_runs totals also
    count failed runs."""
    dims = DIMENSIONS.get(metric)
    if dims is None:
        raise StepError("invalid_request", f"unknown metric {metric!r}; metrics: {', '.join(DIMENSIONS)}")
    group_by = list(group_by or [])
    unknown = [g for g in group_by if g not in dims]
    if unknown:
        raise StepError("invalid_request", f"{metric} cannot be grouped by {', '.join(map(str, unknown))}; "
                        f"dimensions: {', '.join(dims)}")
    start, end = _window(since, until)
    scale = (0.75 + _digest(metric, int(start // WEEK))[0] % 51 / 100) * (end - start) / WEEK
    with store.connect() as conn:
        found = conn.execute('SELECT dims, "values" FROM metric_baselines WHERE metric = ? ORDER BY rowid', (metric,))
        baselines = [(json.loads(r["dims"]), json.loads(r["values"])) for r in found]
    scaled = [(d, {name: _scaled(v, scale) for name, v in values.items()}) for d, values in baselines]
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    totals: dict[str, Any] = {}
    for d, values in scaled:
        key = tuple(d[g] for g in group_by)
        row = groups.setdefault(key, dict(zip(group_by, key, strict=True)))
        for name, v in values.items():
            row[name] = row.get(name, 0) + v
            totals[name] = totals.get(name, 0) + v
        if metric == "workflow_runs" and d["status"] == "failed":
            totals["failed"] = totals.get("failed", 0) + values["runs"]
    rows = [_rounded(g) for g in groups.values()]
    totals = _rounded(totals)
    return {"metric": metric, "since": _iso(start), "until": _iso(end), "rows": rows, "totals": totals}


def _rounded(values: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in values.items()}


def _scaled(value: Any, scale: float) -> Any:
    return round(value * scale, 6) if isinstance(value, float) else int(round(value * scale))


@action("incidents.list", permissions=["incidents:read"], effect="read")
def list_incidents(ctx: Any, since: Any, until: Any, min_severity: str = "sev4") -> dict[str, Any]:
    """Incidents that started in the window with severity ``min_severity`` or worse:
    {items: [{incident_id, severity, title, workflow, started_at, duration_minutes}], count}."""
    if min_severity not in SEVERITIES:
        raise StepError("invalid_request", f"min_severity must be one of {', '.join(SEVERITIES)}")
    start, end = _window(since, until)
    with store.connect() as conn:
        catalogue = [dict(r) for r in conn.execute("SELECT * FROM incident_catalogue ORDER BY id")]
    h = _digest("incidents", int(start // WEEK))
    items = []
    for i in range(h[0] % 4):
        inc = catalogue[(h[1] + i) % len(catalogue)]
        if SEVERITIES.index(inc["severity"]) > SEVERITIES.index(min_severity):
            continue
        started = start + (end - start) * h[2 + i] / 256
        items.append({"incident_id": f"inc_{int(start // WEEK)}_{i + 1}", "severity": inc["severity"],
                      "title": inc["title"], "workflow": inc["workflow"], "started_at": _iso(started),
                      "duration_minutes": inc["duration_minutes"]})
    return {"items": items, "count": len(items)}


@action("reports.archive", permissions=["reports:write"], effect="irreversible")
def archive(ctx: Any, kind: str, period: Any, report: Any, message_id: str | None = None) -> dict[str, Any]:
    """Keep ``report`` as the report of record for (kind, period); returns archive_id."""
    if not isinstance(kind, str) or not kind:
        raise StepError("invalid_request", "reports.archive needs a kind")

    def perform(conn: Any) -> dict[str, Any]:
        n, archive_id = store.next_id(conn, "report_archive", "rep")
        conn.execute("INSERT INTO report_archive VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (n, archive_id, kind, str(period), store.dumps(report), message_id, store.run_id(ctx),
                      store.idempotency_key(ctx)))
        return {"archive_id": archive_id, "kind": kind, "period": str(period)}

    return store.once(ctx, "reports.archive", {"kind": kind, "period": period, "report": report,
                                                "message_id": message_id}, perform)
