"""``/ui/runs``: the tenant's runs, filtered (state, workflow, version, initiator, time range), found by id,
paged by cursor (the store's keyset pages: a page never repeats or skips a run), with the count of each state.

Every filter is a query parameter of a GET form, so a link (the next page's included) keeps them all."""

from __future__ import annotations

import datetime as dt
import re
import urllib.parse
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from sealflow.core.states import RUN_STATES
from sealflow.server.problems import Problem
from sealflow.server.routes.runs import encode_cursor, parse_cursor
from sealflow.server.schemas import NAME, RUN_ID
from sealflow.server.ui import runview
from sealflow.server.ui.pages import page, secure, viewer
from sealflow.store.records import RunQuery
from sealflow.store.tags import parse_tag

router = APIRouter(prefix="/ui/runs", include_in_schema=False)

PAGE = 50
#: the filters of the form, as query parameters (``state`` may repeat)
FILTERS = ("state", "workflow", "version", "initiator", "tag", "after", "before")
_RUN_ID = re.compile(RUN_ID)
_NAME = re.compile(NAME)


class Refused(ValueError):
    """A filter that does not hold (the message says which and why, in the page's words)."""


def _time(name: str, text: str) -> float | None:
    if not text:
        return None
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise Refused(f"{name}: {text[:40]!r} is not a date and time (like 2026-05-01T09:30)") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


def query_of(params: Any, tenant: str) -> tuple[RunQuery, dict[str, Any]]:
    """The store query the page's parameters ask for, and the filters as the form shows them back."""
    states = [s for s in params.getlist("state") if s]
    bad = [s for s in states if s not in RUN_STATES]
    if bad:
        raise Refused(f"state: {bad[0][:40]!r} is not a run state")
    shown = {k: params.get(k, "").strip() for k in FILTERS if k != "state"}
    shown["state"] = states
    if shown["workflow"] and not _NAME.match(shown["workflow"]):
        raise Refused(f"workflow: {shown['workflow'][:60]!r} is not a workflow name")
    version = None
    if shown["version"]:
        if not shown["version"].isdigit() or not 0 < int(shown["version"]) < 2**31:
            raise Refused(f"version: {shown['version'][:20]!r} is not a version number")
        version = int(shown["version"])
    tags: tuple[tuple[str, str], ...] = ()
    if shown["tag"]:
        try:
            tags = (parse_tag(shown["tag"]),)
        except ValueError as exc:
            raise Refused(f"tag: {exc}") from None
    try:
        after = parse_cursor(params.get("cursor") or None)
    except Problem:
        raise Refused("the page link is not one this page made: start again from the first page") from None
    query = RunQuery(tenant=tenant, workflow=shown["workflow"] or None, states=tuple(states) or None,
                     initiator=shown["initiator"][:200] or None, version=version,
                     created_after=_time("from", shown["after"]), created_before=_time("until", shown["before"]),
                     after=after, limit=PAGE, tags=tags)
    return query, shown


def link(shown: dict[str, Any], **more: str) -> str:
    """``/ui/runs`` with the filters ``shown`` (and ``more``) as its query."""
    pairs = [("state", s) for s in shown.get("state", ())]
    pairs += [(k, shown[k]) for k in FILTERS if k != "state" and shown.get(k)]
    pairs += list(more.items())
    return "/ui/runs" + ("?" + urllib.parse.urlencode(pairs) if pairs else "")


#: seconds between two refreshes of the runs list, when its "Refresh automatically" box is ticked
REFRESH_S = 15


@router.get("")
def runs(request: Request) -> Response:
    got = viewer(request)
    if isinstance(got, Response):
        return got
    session, rt = got
    wanted = request.query_params.get("run", "").strip()
    if wanted:  # a run by id: its page (which says when there is none the session may read)
        if not _RUN_ID.match(wanted):
            return page("runs.html", 422, session=session, runs=[], counts=[], shown={"state": []}, states=RUN_STATES,
                        error=f"{wanted[:80]!r} is not a run id", next_link=None,
                        first_link=None, total=0, sought=wanted)
        return secure(RedirectResponse(f"/ui/runs/{wanted}", status_code=303))
    try:
        query, shown = query_of(request.query_params, session.tenant)
    except (Refused, OverflowError) as exc:
        return page("runs.html", 422, session=session, runs=[], counts=[], shown={"state": []}, states=RUN_STATES,
                    error=f"refused: {exc}", next_link=None, first_link="/ui/runs", total=0, sought="")
    found = rt.runs(query, actor=session.principal)
    counts = rt.run_counts(query, actor=session.principal)
    rows = [{"id": r.id, "workflow": r.workflow, "workflow_version": r.workflow_version, "state": r.state,
             "initiator": r.initiator, "created": runview.when(r.created_at),
             "error": r.error_class} for r in found]
    last = found[-1] if len(found) == PAGE else None
    return page("runs.html", session=session, runs=rows, shown=shown, states=RUN_STATES,
                counts=[{"state": s, "count": n, "link": link({**shown, "state": [s]})}
                        for s, n in sorted(counts.items(), key=lambda kv: RUN_STATES.index(kv[0])
                                           if kv[0] in RUN_STATES else 99)],
                total=sum(counts.values()), sought="",
                next_link=link(shown, cursor=encode_cursor(last.created_at, last.id)) if last is not None else None,
                first_link=link(shown) if query.after is not None else None,
                refresh=None if query.after is not None else _refresh_every(request))


def _refresh_every(request: Request) -> int:
    """How often the first page of runs refreshes itself when asked to (``?refresh=N`` seconds, 2..300; else
    :data:`REFRESH_S`). A later page (a cursor) does not: what it lists is fixed by its cursor."""
    raw = request.query_params.get("refresh", "")
    return max(2, min(300, int(raw))) if raw.isdigit() else REFRESH_S
