"""What the run page shows, made from the run's status JSON (``status_json(..., traces=True)``), its plan and its
audit trail: pure functions of those values, so the page and its tests read the same thing."""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Any

from sealflow.core.ids import is_compensation, split_step_id
from sealflow.server.ui.graph import anchor

if TYPE_CHECKING:
    from sealflow.dsl.plan import Plan
    from sealflow.store.records import AuditRecord

#: the most characters of one audit event's detail shown (folded); the API has all of it
MAX_DETAIL_CHARS = 8192


def when(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


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
    """One row per step: its kind, state, attempts, duration, worker, error, traceback, output (pretty), model
    calls and each attempt, with the anchor of its section."""
    rows = []
    for step in run.get("steps", ()):
        error = step.get("error") or {}
        cut = step.get("output_truncated")
        rows.append({
            "id": step["id"], "anchor": anchor(step["id"]), "kind": kind_of(plan, step["id"]),
            "state": step["state"], "attempts": step.get("attempts", 0),
            "duration": seconds(step.get("duration_s")), "started": when(step.get("started_at")),
            "worker": step.get("worker") or "", "error_class": error.get("class"),
            "error_message": error.get("message"), "trace": error.get("trace"),
            "output": pretty(step["output"]) if "output" in step else (cut["preview"] if cut else None),
            "output_cut": cut["chars"] if cut else None,
            "history": [dict(a, started=when(a.get("started_at")), duration=seconds(a.get("duration_s")))
                        for a in step.get("history", ())],
            "calls": [dict(c, at_text=when(c.get("at"))) for c in step.get("model_calls", ())],
            "usage": step.get("usage"), "approval": step.get("approval")})
    return rows


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
    """The audit trail grouped: the run's own events first, then each step's, in the order they first appear;
    each event with its detail as pretty JSON (bounded), to be folded."""
    groups: dict[str, dict[str, Any]] = {}
    for a in trail:
        key = a.step_id or ""
        group = groups.setdefault(key, {"step": a.step_id, "anchor": anchor(a.step_id) if a.step_id else None,
                                        "events": []})
        detail = pretty(a.detail) if a.detail else ""
        if len(detail) > MAX_DETAIL_CHARS:
            detail = detail[:MAX_DETAIL_CHARS] + f"\n… ({len(detail) - MAX_DETAIL_CHARS} more characters: "\
                                                 "GET /v1/runs/{id}/audit has all of it)"
        group["events"].append({"seq": a.seq, "at": when(a.ts), "event": a.event, "actor": a.actor,
                                "moved": f"{a.state_before} → {a.state_after}" if a.state_after else "",
                                "detail": detail})
    run_level = [groups.pop("")] if "" in groups else []
    return run_level + list(groups.values())
