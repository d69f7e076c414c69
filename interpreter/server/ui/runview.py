"""What the run page shows, made from the run's status JSON (``status_json(..., traces=True)``), its plan and its
audit trail: pure functions of those values, so the page and its tests read the same thing."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from sealflow.core.ids import is_compensation, split_step_id
from sealflow.server.ui.graph import anchor

if TYPE_CHECKING:
    from sealflow.dsl.plan import Plan
    from sealflow.store.records import AuditRecord

#: the most characters of one audit event's detail shown (folded); the API has all of it
MAX_DETAIL_CHARS = 8192
#: a run of more steps than this shows a section only for the steps that need one (an error, model calls, an
#: active state, the one asked for), at most this many; the table lists every step
MAX_SECTIONS = 100
#: the audit events a page shows (the latest); the API has all of them
MAX_EVENTS = 500
#: the states of a step still in progress
ACTIVE = ("scheduled", "running", "waiting", "retry_wait")


class Row(dict[str, Any]):
    """A dict whose keys read as attributes too: a template's ``row.key`` finds it at once (on a plain dict
    Jinja first tries the attribute and fails, which costs most of the time of a page of a thousand steps)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def when(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def compact(value: Any) -> str:
    """JSON on one line (wrapped by the page), sorted: an audit event's detail (json's C encoder: a trail of
    thousands of events renders fast; ``pretty`` indents, which only the pure-Python encoder does)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def seconds(value: float | None) -> str:
    """A duration as people read it: ``850 ms``, ``12.4 s``, ``3 min 5 s``."""
    if value is None:
        return ""
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    minutes, rest = divmod(int(value), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def kind_of(plan: Plan | None, step_id: str) -> str:
    """A step's kind as the plan declares it (``approval gate`` for a step's gate, ``compensation`` for its undo)."""
    base, gate = split_step_id(step_id)
    if gate:
        return "approval gate"
    if is_compensation(step_id):
        return "compensation"
    if plan is None:
        return ""
    try:
        return str(plan.step(base).kind)
    except (KeyError, ValueError):
        return ""


def steps(run: dict[str, Any], plan: Plan | None) -> list[dict[str, Any]]:
    """One row per step: its kind, state, attempts, duration, worker, error, traceback, output (made pretty by
    :func:`sectioned` for the steps shown with a section), model calls and each attempt, with the anchor of its
    section."""
    rows: list[dict[str, Any]] = []
    for step in run.get("steps", ()):
        error = step.get("error") or {}
        cut = step.get("output_truncated")
        rows.append(Row({
            "id": step["id"], "anchor": anchor(step["id"]), "kind": kind_of(plan, step["id"]),
            "state": step["state"], "attempts": step.get("attempts", 0),
            "duration": seconds(step.get("duration_s")), "started_at": step.get("started_at"),
            "worker": step.get("worker") or "", "error_class": error.get("class"),
            "error_message": error.get("message"), "trace": error.get("trace"),
            "output": None, "value": step.get("output"), "has_output": "output" in step,
            "preview": cut["preview"] if cut else None,
            "output_cut": cut["chars"] if cut else None,
            "attempts_seen": step.get("history", ()), "history": [],
            "calls": [Row(c, at_text=when(c.get("at"))) for c in step.get("model_calls", ())],
            "usage": step.get("usage"), "approval": step.get("approval")}))
    return rows


def sectioned(rows: list[dict[str, Any]], asked: str | None) -> int:
    """Mark which steps get a section of their own (``section``) and where a link to each goes (``href``): every
    step when there are at most :data:`MAX_SECTIONS`; else those with an error, model calls or an active state,
    and ``asked`` (the page's ``step`` parameter), at most :data:`MAX_SECTIONS`. How many steps have none."""
    def needs(row: dict[str, Any]) -> bool:
        return bool(row["error_class"] or row["calls"] or row["state"] in ACTIVE or row["id"] == asked)

    chosen = rows if len(rows) <= MAX_SECTIONS else sorted(
        (r for r in rows if needs(r)), key=lambda r: r["id"] != asked)[:MAX_SECTIONS]  # (the one asked for first)
    keep = {r["id"] for r in chosen}
    for row in rows:
        row["section"] = row["id"] in keep
        if row["section"]:  # (made pretty only where shown: a page of a 1,000-step run shows few)
            row["output"] = pretty(row["value"]) if row["has_output"] else row["preview"]
            row["history"] = [Row(a, started=when(a.get("started_at")), duration=seconds(a.get("duration_s")))
                              for a in row["attempts_seen"]]
        row["href"] = f"#{row['anchor']}" if row["section"] else f"?step={row['id']}#{row['anchor']}"
    return len(rows) - len(keep)


def budgets(run: dict[str, Any], plan: Plan | None, record_times: tuple[float, float]) -> list[dict[str, Any]]:
    """Each of the run's declared budgets: what it used against the limit (``percent`` of it)."""
    if plan is None:
        return []
    usage, limits = run.get("usage") or {}, plan.budget
    created, updated = record_times
    rows = []
    for name, used, limit, show in (
            ("steps", usage.get("steps"), limits.max_steps, str),
            ("tokens", usage.get("tokens"), limits.max_tokens, str),
            ("cost (USD)", usage.get("cost_usd"), limits.max_cost_usd, lambda v: f"{v:.4f}"),
            ("tool calls", usage.get("tool_calls"), limits.max_tool_calls, str),
            ("run time", max(0.0, updated - created), None if limits.max_runtime_ms is None
             else limits.max_runtime_ms / 1000, seconds)):
        if limit is None:
            continue
        used = used or 0
        rows.append({"name": name, "used": show(used), "limit": show(limit),
                     "percent": min(100, round(100 * used / limit)) if limit else 100})
    return rows


def audit_groups(trail: list[AuditRecord]) -> list[dict[str, Any]]:
    """The audit trail's latest :data:`MAX_EVENTS` events grouped: the run's own events first, then each step's,
    in the order they first appear; each event with its detail as JSON (bounded), to be folded."""
    groups: dict[str, dict[str, Any]] = {}
    for a in trail[-MAX_EVENTS:]:
        key = a.step_id or ""
        group = groups.setdefault(key, Row({"step": a.step_id, "anchor": anchor(a.step_id) if a.step_id else None,
                                            "events": []}))
        detail = compact(a.detail) if a.detail else ""
        if len(detail) > MAX_DETAIL_CHARS:
            detail = detail[:MAX_DETAIL_CHARS] + f"\n… ({len(detail) - MAX_DETAIL_CHARS} more characters: "\
                                                 "GET /v1/runs/{id}/audit has all of it)"
        group["events"].append(Row({"seq": a.seq, "at": when(a.ts), "event": a.event, "actor": a.actor,
                                    "moved": f"{a.state_before} → {a.state_after}" if a.state_after else "",
                                    "detail": detail}))
    run_level = [groups.pop("")] if "" in groups else []
    return run_level + list(groups.values())
