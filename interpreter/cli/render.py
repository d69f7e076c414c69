"""Every rendering of a run, in text and JSON: its status, its live timeline, its audit trail, the approvals
and dead letters that name it; and the exit code its state means.

Exit codes: 0 completed, 3 waiting, 1 a failed end state (failed, cancelled, timed_out, quarantined).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from sealflow.runtime.facade import Runtime
    from sealflow.runtime.status import RunStatus
    from sealflow.store.base import AttemptRecord, AuditRecord, DeadLetterRecord

FAILED_STATES = {"failed", "cancelled", "timed_out", "quarantined"}

#: audit record fields the text view of ``audit RUN`` leaves out (``--json`` has them)
CHAIN_BOOKKEEPING = ("tenant", "workflow", "workflow_version", "plan_digest", "seq", "prev_hash", "hash")

_ENDED = ("succeeded", "failed", "timed_out", "skipped", "cancelled", "retry_wait", "waiting")


def _json(value: Any, **kw: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str, **kw)


# ---------------------------------------------------------------- status

def repeat_flags(skip: tuple[str, ...] = ()) -> str:
    """The flags of this command line that a follow-up command on the same run needs too (``--store``,
    ``--access``, ``--actions``, ``--trust``, ``--tenant``, ``--config``, ``--project``), as shell words;
    what the environment or ``sealflow.yaml`` gives needs no repeating."""
    import shlex

    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return ""
    words: list[str] = []
    root = ctx.find_root()
    for name, flag, c in (("project_path", "--project", root), ("config_path", "--config", root),
                          ("store_url", "--store", ctx), ("access_path", "--access", ctx),
                          ("actions", "--actions", ctx), ("trust", "--trust", ctx), ("tenant", "--tenant", ctx)):
        if flag in skip or c.get_parameter_source(name) is not ParameterSource.COMMANDLINE:
            continue
        value = c.params.get(name) if name in c.params else (c.obj or {}).get(name)
        for v in (value if isinstance(value, (tuple, list)) else (value,)):
            if v is not None:
                words += [flag, shlex.quote(str(v))]
    return " ".join(words)



def debugging() -> bool:
    """``SEALFLOW_DEBUG=1``: tracebacks for internal errors, an action's exception included (docs/project.md)."""
    return bool(os.environ.get("SEALFLOW_DEBUG"))


def status_dict(status: RunStatus, *, traces: bool = False) -> dict[str, Any]:
    """The run as one JSON object (docs/runtime.md names its fields; the HTTP API serves the same); ``traces``:
    with the tracebacks of its failed steps (only for a caller that was authorised to read the run)."""
    from sealflow.runtime.status import status_json

    return status_json(status, traces=traces)


def print_traces(status: RunStatus) -> None:
    """The traceback each failed step's attempt kept (an exception in its code), indented under its step."""
    for step in status_dict(status, traces=True)["steps"]:
        trace = (step.get("error") or {}).get("trace")
        if trace:
            click.echo(f"traceback of step {step['id']}:")
            for line in trace.splitlines():
                click.echo(f"  {line}")


def exit_code(state: str) -> int:
    return 0 if state == "completed" else 3 if state == "waiting" else 1 if state in FAILED_STATES else 3


def duration(seconds: float) -> str:
    """A duration as every command prints it, the way definitions write them: ``250ms``, ``5s``, ``1.5s``,
    ``2m30s``, ``24h``, ``26h30m`` (at most two units, rounded; hours are the largest unit)."""
    ms = max(0, round(seconds * 1000))
    if ms < 1000:
        return f"{ms}ms"
    if ms < 10_000 and ms % 1000:
        return f"{ms / 1000:.1f}s"
    left = round(ms / 1000)
    parts: list[str] = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size}{unit}")
            left %= size
        elif parts:
            parts.append("")
        if len(parts) == 2:
            break
    return "".join(p for p in parts if p and not p.startswith("0"))


def _ms(a: AttemptRecord) -> str:
    if a.started_at and a.ended_at:
        return duration(a.ended_at - a.started_at)
    return ""


def print_timeline(status: RunStatus, *, since: int = 0) -> None:
    """One line per attempt: step, attempt, state, duration, error, when it is due."""
    for a in status.attempts[since:]:
        tries = f"attempt {a.attempt}"
        line = f"  {a.step_id:<24} {tries:<10} {a.state:<10} {_ms(a):>7}"
        if a.error_class:
            line += f"  {a.error_class}: {a.error_message}"
        if a.state in ("retry_wait", "waiting") and a.due_at:
            line += f"  (due in {duration(max(a.due_at - time.time(), 0))})"
        click.echo(line)


def print_header(status: RunStatus) -> None:
    run = status.run
    click.echo(f"run {run.id}  {run.workflow} v{run.workflow_version}  {run.plan_digest[:19]}...  "
               f"initiator {run.initiator}")


def print_items(status: RunStatus) -> None:
    """Per fan-out step: its items as a count by state, then its failures (``--json`` lists every child run)."""
    for step_id, items in getattr(status, "items", {}).items():
        counts = ", ".join(f"{n} {state}" for state, n in sorted(items["counts"].items()))
        click.echo(f"items of {step_id}: {items['total']} ({counts})")
        for f in items["failures"]:
            click.echo(f"  item {f['index']} {f['state']}: {f['error']['class']}: {f['error']['message']}  "
                       f"(sealflow status {f['run_id']})")


def print_outcome(status: RunStatus) -> None:
    """Where the run stands: its state, its error, what it waits for (and how to answer), its output."""
    run = status.run
    click.echo(f"state: {run.state}")
    if run.error_class:
        click.echo(f"error: {run.error_class}: {run.error_message}")
    if status.waiting:
        w = status.waiting
        flags = repeat_flags()
        flags = f" {flags}" if flags else ""
        if w.get("kind") == "plan_tampered":  # nothing of its plan is shown or used (engine/integrity.py)
            where = f" at {w['step']}" if w.get("step") else ""
            click.echo(f"refused{where}: {w.get('reason')}")
            click.echo(f"  {w.get('how')}")
        elif w.get("kind") == "approval":
            approvers = w.get("approvers") or []
            others = [a for a in approvers if a != run.initiator]  # nobody approves their own run
            who = others[0] if len(others) == 1 and not str(others[0]).startswith("role:") else "PRINCIPAL"
            click.echo(f"waiting for approval at {w['step']} by {', '.join(approvers)} "
                       f"(quorum {w.get('quorum')}); answer with: sealflow approve {run.id} --as {who}{flags}  or  "
                       f"sealflow reject {run.id} --as {who} --reason TEXT{flags}")
        elif w.get("kind") == "outcome_unknown":
            click.echo(f"waiting for a person at {w['step']}: its attempt was lost ({w.get('observed')}) and its "
                       f"action {w.get('action')} cannot deduplicate, so it may or may not have acted; check its "
                       f"target, then answer with: sealflow resolve {run.id} --retry|--succeeded --output JSON|"
                       f"--failed --reason TEXT --as PRINCIPAL{flags}")
        elif w.get("kind") == "rate_limit":
            click.echo(f"{w.get('reason')} (step {w['step']}); `sealflow recover{flags}` drives it on when due")
        elif w.get("kind") == "process" and w.get("lacks_here") is False:  # others left it; this one has it
            needs = lacks_names([tuple(lack) for lack in w.get("lacks") or ()])
            click.echo(f"waiting at {w['step']} for a process that has {needs}: {', '.join(w.get('left_by') or ())} "
                       f"took it and left it, lacking it; this process has it: `sealflow recover{flags}` runs the "
                       "step here")
        elif w.get("kind") == "process" and not w.get("left_here", True):
            needs = lacks_names([tuple(lack) for lack in w.get("lacks") or ()])
            by = w.get("left_by") or ()
            click.echo(f"waiting at {w['step']} for a process that has {needs} (this one lacks it too"
                       + (f"; so does {', '.join(by)}" if by else "") + "):")
            for line in w.get("how") or ():
                click.echo(f"  {line}")
            click.echo(f"provide it, then `sealflow recover{flags}` runs the step (or a worker that has it does)")
        elif w.get("kind") == "process":
            click.echo(f"waiting at {w['step']} for a process that can run it; this one lacks what it needs, so it "
                       "left the step as it was:")
            for line in w.get("how") or ():
                click.echo(f"  {line}")
            click.echo(f"provide it, then `sealflow recover{flags}` runs the step (or a worker that has it does)")
        elif w.get("kind") == "fanout":
            click.echo(f"waiting for the child runs of {w['step']} (items below); `sealflow recover{flags}` drives "
                       f"them on; an item waiting for approval is listed by `sealflow approvals list{flags}`")
        elif w.get("kind") == "call":
            click.echo(f"waiting for {w.get('workflow')} v{w.get('version')}, which {w['step']} called: run "
                       f"{w.get('child')} ({w.get('child_state')}); `sealflow status {w.get('child')}` shows it")
        else:
            click.echo(f"waiting ({w.get('kind')}) at {w['step']}; `sealflow recover{flags}` drives it on when due")
    print_items(status)
    if run.state == "completed":
        click.echo("output: " + _json(run.output))


def print_recovered(results: dict[str, Any], report: dict[str, Any]) -> None:
    """``sealflow recover``: one summary line, the runs it drove on, and each run it left with what this process
    lacks to continue it and how to provide that."""
    left, unreadable = report["runs_left"], report["runs_left_unreadable"]
    line = f"recovered: {len(results)} run(s) in flight"
    if left or unreadable:
        line += f"; left {len(left) + unreadable} run(s) as they were: this process cannot continue them"
    click.echo(line)
    for run_id, state in results.items():
        click.echo(f"  {run_id}: {state}")
    for entry in left:
        click.echo(f"  {entry['run_id']} ({entry['workflow']} v{entry['version']}): left, this process lacks:")
        for how in entry["how"]:
            click.echo(f"    {how}")
    if unreadable:
        needs = lacks_names([tuple(lack) for lack in report["lacks_unreadable"]])
        click.echo(f"  {unreadable} run(s) you may not read: left, they need {needs}; an operator's `sealflow "
                   "recover` or a worker with them continues them")
    if left or unreadable:
        click.echo(f"provide what is missing, then `sealflow recover{_flags()}` continues them (or a worker that has "
                   "it does)")
    print_refused(report)


def print_refused(report: dict[str, Any]) -> None:
    """``sealflow recover``: each run refused for its stored plan (engine/integrity.py), with the reason, what
    became of it and what to do."""
    from sealflow.runtime.readiness import PENDING_TAMPERED

    refused, unreadable = report.get("runs_refused") or [], report.get("runs_refused_unreadable") or 0
    if not refused and not unreadable:
        return
    click.echo(f"refused {len(refused) + unreadable} run(s): the stored plan does not match its digest, so they are "
               "not executed")
    for entry in refused:
        state = entry.get("state")
        click.echo(f"  {entry['run_id']} ({entry['workflow']} v{entry['version']}): refused"
                   f"{f', {state}' if state else ''}: {entry['reason']}")
        if state == "cancelled":  # an operator's cancel stood: nothing to redrive
            continue
        pending = "" if state in FAILED_STATES else f"{PENDING_TAMPERED}; "
        click.echo(f"    {pending}{entry['how']}")
    if unreadable:
        click.echo(f"  {unreadable} run(s) you may not read: refused for the same reason; an operator's `sealflow "
                   "recover` names them")


def lacks_names(lacks: list[Any]) -> str:
    from sealflow.runtime.readiness import lacks_names as names

    return names(lacks)


def _flags() -> str:
    flags = repeat_flags()
    return f" {flags}" if flags else ""


def finish(status: RunStatus, as_json: bool, *, header: bool = True, traces: bool = False) -> NoReturn:
    """Print the run (JSON, or text: its header and timeline unless ``header`` is False, then its outcome)
    and exit with the code its state means. ``traces``: the tracebacks its failed steps kept too (the caller was
    authorised to read the run); otherwise a failure that kept one says where to see it."""
    if as_json:
        click.echo(_json(status_dict(status, traces=traces), indent=2))
    else:
        if header:
            print_header(status)
            print_timeline(status)
        print_outcome(status)
        if traces:
            print_traces(status)
        elif any(a.error_trace for a in status.attempts):
            click.echo(f"traceback: `sealflow status {status.run.id}{_flags()}` shows it (or set SEALFLOW_DEBUG=1)")
    sys.exit(exit_code(status.state))


# ---------------------------------------------------------------- the live view of `run`

class LiveTimeline:
    """Prints each attempt as it starts and as it ends, read from the store while the run is driven."""

    def __init__(self) -> None:
        self.shown: dict[tuple[str, int], str] = {}

    def update(self, status: RunStatus) -> None:
        for a in status.attempts:
            key = (a.step_id, a.attempt)
            last = self.shown.get(key)
            if a.state == last or a.state in ("pending", "scheduled"):
                continue
            self.shown[key] = a.state
            if a.state == "running":
                click.echo(f"  {a.step_id:<24} {'attempt ' + str(a.attempt):<10} started")
            elif a.state in _ENDED:
                print_timeline(type(status)(status.run, [a], status.waiting))


def follow_live(rt: Runtime, run_id: str, *, poll: float = 0.5, echo: bool = True) -> RunStatus:
    """Follow the run's live feed (what ``GET /v1/runs/{id}/events`` streams: each state change of the run and
    its steps, in order), printing each item (``echo``), until the run ends or waits for a person; the final
    status. The workers run the steps: this process only reads."""
    import time

    from sealflow.core.states import RUN_FINAL

    after = 0
    while True:
        items, state = rt.feed(run_id, after=after)
        for item in items:
            after = max(after, int(item["id"]))
            if not echo:
                continue
            moved = f"{item['from'] or '-'} -> {item['to']}" if item["to"] else ""
            when = time.strftime("%H:%M:%S", time.localtime(item["at"]))
            click.echo(f"  {when}  {item['event']:<22} {item['step'] or '':<24} {moved}".rstrip())
        if not items and (state in RUN_FINAL or rt.awaits_human(run_id)):
            return rt.status(run_id)
        if not items:
            time.sleep(poll)


def drive_live(rt: Runtime, run_id: str, *, until: str = "settled") -> RunStatus:
    """Drive the run on a background thread, printing its steps as they start and end; the final status.
    ``until="final"`` (``run --follow``, ``status --watch``) sleeps through timers of any length: it stops
    only when the run ends or waits for a human."""
    import threading

    ended: list[RunStatus] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            ended.append(rt.drive(run_id, until=until))
        except BaseException as exc:  # re-raised on the calling thread
            errors.append(exc)

    from sealflow.store.errors import StoreUnavailable

    timeline = LiveTimeline()
    thread = threading.Thread(target=work, name="sealflow-drive", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
        if thread.is_alive():
            try:
                timeline.update(rt.status(run_id))
            except StoreUnavailable:  # the driving thread says so and rides it out, or gives up with it
                thread.join(1.0)
    if errors:
        raise errors[0]
    timeline.update(ended[0])
    return ended[0]


# ---------------------------------------------------------------- what names runs

def print_audit(events: Sequence[AuditRecord], as_json: bool) -> None:
    """A run's audit trail, oldest first: one line per event (``--json``: every field)."""
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(e) for e in events], indent=2, default=str))
        return
    for e in events:
        d = dataclasses.asdict(e)
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(d.get("at") or d.get("ts") or 0))
        rest = {k: v for k, v in d.items() if k not in ("id", "run_id", "at", "ts", "event", "step_id", "actor")
                and k not in CHAIN_BOOKKEEPING and v not in (None, {}, "")}
        click.echo(f"{when}  {d.get('event'):<22} {d.get('step_id') or '-':<22} {d.get('actor') or '-':<16} "
                   f"{json.dumps(rest, default=str)}")


def print_approvals(waiting: list[dict[str, Any]], principal: str, tenant: str, as_json: bool) -> None:
    """The approval gates ``principal`` may decide now, with the commands that answer them."""
    if as_json:
        click.echo(_json(waiting, indent=2))
        return
    if not waiting:
        click.echo(f"nothing waits for {principal} in tenant {tenant}")
        return
    for w in waiting:
        due = "" if w["due_at"] is None else f"  due in {duration(max(w['due_at'] - time.time(), 0))}"
        click.echo(f"{w['run_id']}  {w['workflow']} v{w['version']}  at {w['step']}  as {w['as']}  "
                   f"approvals {w['approvals']}/{w['quorum']}  started by {w['initiator']}{due}")
        click.echo(f"    input: {_json(w.get('input'))}")
        if w.get("item"):
            click.echo(f"    item {w['item']['index']} of {w['item']['parent']} ({w['item']['step']}): "
                       f"{_json(w['item']['value'])}")
        click.echo(f"    show {w['show_hash'][:23]}...: {_json(w['show'])}")
        flags = repeat_flags(skip=("--tenant",))
        flags = f" {flags}" if flags else ""
        click.echo(f"    sealflow approve {w['run_id']} --as {principal} --tenant {tenant}{flags}  |  sealflow reject "
                   f"{w['run_id']} --as {principal} --tenant {tenant} --reason TEXT{flags}")


def print_dead_letters(letters: Sequence[DeadLetterRecord], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(x) for x in letters], indent=2, default=str))
        return
    if not letters:
        click.echo("the dead-letter list is empty")
    for x in letters:
        flag = " QUARANTINED" if getattr(x, "quarantined", False) else ""
        click.echo(f"{x.run_id}  {x.reason}{flag}")


def when(ts: float | None) -> str:
    """A store timestamp as every text view prints it: UTC, to the second (``2026-12-01 04:20:23Z``)."""
    if not ts:
        return "-"
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def print_dead_letter(detail: dict[str, Any], as_json: bool) -> None:
    """``dlq show``: JSON for machines, else the dead letter, its failed attempts and its last audit events,
    with readable times and durations."""
    if as_json:
        click.echo(_json(detail, indent=2))
        return
    d, run = detail["dead_letter"], detail["run"]
    flag = " (quarantined)" if d.get("quarantined") else ""
    click.echo(f"dead letter {d['run_id']}  {run.get('workflow')} v{run.get('workflow_version')}  "
               f"state {run.get('state')}{flag}")
    click.echo(f"  reason:      {d['reason']}")
    click.echo(f"  failed step: {d.get('step_id') or '-'}  ({d.get('error_class')})")
    if run.get("error_message"):
        click.echo(f"  error:       {run.get('error_class')}: {run['error_message']}")
    click.echo(f"  dead since:  {when(d.get('created_at'))}  redriven {d.get('redrive_count', 0)} time(s)")
    click.echo(f"  fingerprint: {d.get('fingerprint')}")
    if detail.get("failed_attempts"):
        click.echo("failed attempts:")
        for a in detail["failed_attempts"]:
            took = duration(a["ended_at"] - a["started_at"]) if a.get("started_at") and a.get("ended_at") else ""
            click.echo(f"  {when(a.get('ended_at'))}  {a['step_id']:<20} attempt {a['attempt']:<3} {took:>6}  "
                       f"{a.get('error_class')}: {a.get('error_message')}")
        last = next((a for a in reversed(detail["failed_attempts"]) if a.get("error_trace")), None)
        if last is not None:  # (the last one: a retried failure would print the same traceback again)
            click.echo(f"traceback of {last['step_id']} attempt {last['attempt']}:")
            for line in last["error_trace"].splitlines():
                click.echo(f"  {line}")
    if detail.get("audit"):
        click.echo("last audit events:")
        for e in detail["audit"]:
            click.echo(f"  {when(e.get('ts'))}  {e['event']:<22} {e.get('step_id') or '-':<20} {e.get('actor')}")
    click.echo(f"redrive it with: sealflow dlq redrive {d['run_id']}")
