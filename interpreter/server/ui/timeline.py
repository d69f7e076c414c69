"""A run's timeline as SVG: one row per step, a bar per attempt from when it started to when it ended (or now,
while it runs), coloured by the attempt's state (a CSS class, ``state-<state>``, the graph's colours); the time
between two attempts of one step (a retry's backoff, a wait, a lost lease) a dotted line labelled with how long.
Each bar's title says the attempt, its state, when, how long, the worker and the error; the attempts table of
the step's section says the same in words (the timeline is a picture of it, ``role="img"``).

Only the first :data:`MAX_ROWS` steps (by when they first started) are drawn: the page says how many more.
"""

from __future__ import annotations

import time
from typing import Any

from markupsafe import Markup, escape

#: the most steps (rows) drawn
MAX_ROWS = 60
LABEL_W, BAR_W, ROW_H, BAR_H, TOP = 170, 640, 22, 14, 26


def _span(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def rows_of(run: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(step id, its attempts that started, oldest first) of each step that has one, by when it first started."""
    found = []
    for step in run.get("steps", ()):
        started = [a for a in step.get("history", ()) if a.get("started_at") is not None]
        if started:
            found.append((step["id"], sorted(started, key=lambda a: a["started_at"])))
    return sorted(found, key=lambda r: r[1][0]["started_at"])


def svg(run: dict[str, Any], *, now: float | None = None) -> tuple[Markup | None, int]:
    """The timeline (None: no attempt started yet) and how many steps it leaves out (beyond :data:`MAX_ROWS`)."""
    rows = rows_of(run)
    if not rows:
        return None, 0
    left_out = max(0, len(rows) - MAX_ROWS)
    rows = rows[:MAX_ROWS]
    now = time.time() if now is None else now
    first = min(a["started_at"] for _, attempts in rows for a in attempts)
    last = max((a.get("ended_at") or now) for _, attempts in rows for a in attempts)
    total = max(last - first, 1e-3)

    def x(at: float) -> float:
        return float(LABEL_W + (at - first) / total * BAR_W)

    width, height = LABEL_W + BAR_W + 70, TOP + len(rows) * ROW_H + 8
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="timeline" class="timeline" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img" aria-label="timeline of the run\'s attempts over '
           f'{escape(_span(total))} (each step\'s attempts table says the same)">',
           f'<text x="{LABEL_W}" y="14" class="axis">0</text>',
           f'<text x="{LABEL_W + BAR_W}" y="14" class="axis" text-anchor="end">{escape(_span(total))}</text>']
    for i, (step_id, attempts) in enumerate(rows):
        y = TOP + i * ROW_H
        out.append(f'<text x="{LABEL_W - 8}" y="{y + BAR_H - 3}" class="row-label" text-anchor="end">'
                   f'{escape(step_id if len(step_id) <= 22 else step_id[:21] + "…")}</text>')
        ended_before: float | None = None
        for a in attempts:
            start, end = a["started_at"], a.get("ended_at") or now
            if ended_before is not None and start > ended_before:  # between two attempts: backoff, a wait
                gap = _span(start - ended_before)
                out.append(f'<line x1="{x(ended_before):.1f}" y1="{y + BAR_H / 2}" x2="{x(start):.1f}" '
                           f'y2="{y + BAR_H / 2}" class="gap"><title>{escape(step_id)}: {gap} between attempts'
                           f'</title></line>')
            bar_w = max(2.0, x(end) - x(start))
            error = a.get("error") or {}
            said = (f"{step_id} attempt {a['attempt']} (try {a.get('try', 1)}): {a['state']}, "
                    f"{_span(max(0.0, end - start))}" + (f", on {a['worker']}" if a.get("worker") else "")
                    + (f"; {error.get('class')}: {error.get('message') or ''}" if error else ""))
            out.append(f'<rect x="{x(start):.1f}" y="{y}" width="{bar_w:.1f}" height="{BAR_H}" rx="2" '
                       f'class="bar state-{escape(a["state"])}"><title>{escape(said[:300])}</title></rect>')
            ended_before = end
        out.append(f'<text x="{LABEL_W + BAR_W + 6}" y="{y + BAR_H - 3}" class="row-note">'
                   f'{len(attempts)}×</text>')
    out.append("</svg>")
    return Markup("".join(out)), left_out
