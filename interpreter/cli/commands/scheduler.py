"""`sealflow scheduler`: submit scheduled definitions at their cron slots, as their run_as identity."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sealflow.cli import definition_files
from sealflow.cli.definition_files import expand_paths
from sealflow.cli.exits import fail_usage, refuse
from sealflow.cli.options import (
    access_option,
    actions_option,
    json_flag,
    metrics_options,
    store_option,
    tenant_option,
)
from sealflow.cli.session import open_runtime, project_actions, trust_path, with_demo

if TYPE_CHECKING:
    from sealflow.runtime.facade import Runtime
    from sealflow.runtime.telemetry.metrics import Metrics

SCHEDULER = "service:sealflow-scheduler"


def _parse_at(value: str | None) -> dt.datetime | None:
    if value is None:
        return None
    try:
        at = dt.datetime.fromisoformat(value)
    except ValueError:
        fail_usage(f"--at {value!r} is not an ISO-8601 time (e.g. 2026-11-30T07:00:00+01:00)")
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


def _may_be_scheduled(path: Path) -> bool:
    """Whether the file may declare a ``trigger.schedule``: an unscheduled definition beside the scheduled ones
    (an unsigned draft, say) is not loaded, so it is neither verified nor a reason to refuse. A file that is not
    plain YAML is loaded anyway, to report its error."""
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError, ValueError):
        return True
    if not isinstance(doc, dict):
        return True
    trigger = doc.get("trigger")
    return trigger is not None and (not isinstance(trigger, dict) or "schedule" in trigger)


@dataclasses.dataclass(eq=False)
class Entry:
    """A scheduled definition: the file it was loaded from, the loaded plan and its ``trigger.schedule``."""

    path: str
    loaded: definition_files.Loaded
    schedule: dict[str, Any]


class Schedules:
    """The definitions a scheduler keeps scheduling. One that cannot be scheduled (it does not load, or a slot
    of it cannot be computed) is skipped, never a reason to stop: one line on stderr names the file and why, and
    ``sealflow_schedule_errors_total{reason}`` counts it (once the runtime's metrics are known: :meth:`count_on`)."""

    def __init__(self, entries: list[Entry]):
        self.entries = entries
        #: definitions skipped so far (at load and since)
        self.skipped = 0
        self._metrics: Metrics | None = None
        self._uncounted: list[str] = []

    def skip(self, path: str, reason: str, why: str, hint: str | None = None, *, later: bool = False) -> None:
        rest = "; the others are still scheduled" if later else ""
        click.echo(f"sealflow: scheduler: skipped {path} ({reason}): {why}{rest}"
                   + (f" (hint: {hint})" if hint else ""), err=True)
        self.skipped += 1
        if self._metrics is None:
            self._uncounted.append(reason)
        else:
            self._metrics.schedule_error(reason)

    def drop(self, entry: Entry, exc: Exception) -> None:
        """Stop scheduling ``entry``: a slot of it could not be computed (:class:`ScheduleError`)."""
        if entry in self.entries:
            self.entries.remove(entry)
            self.skip(entry.path, "slot_failed", f"its next slot cannot be computed: {exc}", later=True)

    def count_on(self, metrics: Metrics) -> None:
        self._metrics = metrics
        for reason in self._uncounted:
            metrics.schedule_error(reason)
        self._uncounted.clear()

    def soonest(self, now: dt.datetime) -> tuple[dt.datetime, Entry] | None:
        """The next slot of any definition, and whose (None: none is left)."""
        from sealflow.core.schedule import ScheduleError, next_slot

        found = None
        for entry in list(self.entries):
            try:
                slot = next_slot(entry.schedule["cron"], entry.schedule.get("timezone"), now)
            except ScheduleError as exc:
                self.drop(entry, exc)
                continue
            if found is None or slot < found[0]:
                found = (slot, entry)
        return found


def _load(paths: tuple[str, ...], actions: tuple[str, ...], trust: str | None) -> Schedules:
    entries: list[Entry] = []
    schedules = Schedules(entries)
    for path in expand_paths(paths):
        if not _may_be_scheduled(path):
            continue
        try:
            loaded = definition_files.try_load(str(path), with_demo(actions), trust=trust)
        except definition_files.NotLoaded as exc:
            schedules.skip(str(path), exc.reason, exc.message, exc.hint)
            continue
        schedule = loaded.plan.trigger.schedule if loaded.plan.trigger else None
        if schedule:
            entries.append(Entry(str(path), loaded, schedule))
    if not entries:
        if schedules.skipped:
            refuse(f"none of the given definitions can be scheduled: {schedules.skipped} skipped (above)",
                   "fix them (sealflow validate names each problem) and start the scheduler again")
        fail_usage("none of the given definitions has a trigger.schedule")
    return schedules


def fire(rt: Runtime, schedules: Schedules, now: dt.datetime, *, tenant: str, catch_up: dt.timedelta,
         drive: bool) -> list[dict[str, Any]]:
    """Submit every definition whose latest slot is due (idempotently, per slot); return what was done. A
    definition whose slot cannot be computed is skipped from now on (:meth:`Schedules.drop`)."""
    from sealflow.core.errors import StepError
    from sealflow.core.schedule import ScheduleError, due_slot, slot_key
    from sealflow.policy.authz import Unauthorized
    from sealflow.store import AdmissionRefused
    from sealflow.store.definitions import DefinitionRefused

    done = []
    for entry in list(schedules.entries):
        loaded, schedule = entry.loaded, entry.schedule
        plan = loaded.plan
        try:
            slot = due_slot(schedule["cron"], schedule.get("timezone"), now, catch_up)
        except ScheduleError as exc:
            schedules.drop(entry, exc)
            continue
        if slot is None:
            continue
        key = slot_key(plan.name, plan.version, slot)
        entry_done = {"workflow": plan.name, "version": plan.version, "slot": slot.isoformat(), "run_as":
                      schedule.get("run_as")}
        try:
            # the definition, its signed bytes and the run are recorded in one transaction, after authorisation
            run_id = rt.submit(plan, {}, initiator=SCHEDULER, tenant=tenant, idempotency_key=key,
                               run_as=schedule.get("run_as"), signer=loaded.signer, source=loaded.source)
        except (Unauthorized, StepError, AdmissionRefused, DefinitionRefused) as exc:
            entry_done["refused"] = getattr(exc, "message", str(exc))
            done.append(entry_done)
            continue
        entry_done["run_id"] = run_id
        entry_done["state"] = (rt.drive(run_id) if drive else rt.status(run_id)).state
        done.append(entry_done)
    return done


def serve(rt: Runtime, schedules: Schedules, stop: threading.Event, *, tenant: str, catch_up: dt.timedelta,
          drive: bool, as_json: bool, now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> int:
    """Fire what is due, then sleep until the next slot (at most a minute), until ``stop`` is set; the exit code
    (1 when every definition was skipped: nothing is left to schedule)."""
    while not stop.is_set():
        at = now()
        _report(fire(rt, schedules, at, tenant=tenant, catch_up=catch_up, drive=drive), as_json)
        soonest = schedules.soonest(at)
        if soonest is None:
            click.echo("sealflow: scheduler: no scheduled definition is left (each was skipped, above); stopping",
                       err=True)
            return 1
        stop.wait(max(1.0, min((soonest[0] - at).total_seconds(), 60.0)))
    return 0


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@actions_option
@store_option
@tenant_option
@access_option
@click.option("--trust", metavar="POLICY", envvar="SEALFLOW_TRUST", help="Load only signed definitions.")
@click.option("--catch-up", "catch_up_s", type=click.FloatRange(0), default=3600.0, show_default=True,
              metavar="SECONDS", help="Submit a missed slot if it is no older than this.")
@click.option("--once", is_flag=True, help="Submit what is due now (or at --at), then exit.")
@click.option("--at", "at", metavar="ISO-8601", help="With --once: act as if it were this time.")
@click.option("--no-drive", is_flag=True, help="Only submit: workers drive the runs.")
@metrics_options
@json_flag(None)
def scheduler(paths: tuple[str, ...], actions: tuple[str, ...], store_url: str | None, tenant: str,
              access_path: str | None, trust: str | None, catch_up_s: float, once: bool, at: str | None,
              no_drive: bool, metrics_port: int | None, metrics_addr: str, as_json: bool) -> None:
    """Submit scheduled definitions at their cron slots, each run acting as the schedule's run_as.

    Each slot is submitted once (its idempotency key names the definition, version and slot), so
    restarts and several schedulers on one store never submit a slot twice; a missed slot older than
    --catch-up is skipped, not replayed. On the embedded default the runs are driven here. A definition
    that cannot be scheduled (it does not validate or verify, or its next slot cannot be computed) is
    skipped with one line saying why, and the others are scheduled.
    """
    at_time = _parse_at(at)
    if at_time is not None and not once:
        fail_usage("--at goes with --once")
    if once and metrics_port is not None:
        fail_usage("--metrics-port is for a scheduler that keeps running: a --once round ends before a scraper "
                   "reads it")
    trust = trust_path(trust)
    schedules = _load(paths, project_actions(actions), trust)
    catch_up = dt.timedelta(seconds=catch_up_s)
    with open_runtime(store_url, actions, access=access_path, trust=trust) as rt:
        schedules.count_on(rt.telemetry.metrics)
        if once:
            now = at_time or dt.datetime.now(dt.UTC)
            done = fire(rt, schedules, now, tenant=tenant, catch_up=catch_up, drive=not no_drive)
            _report(done, as_json)
            if not done and not as_json:
                nxt = schedules.soonest(now)
                if nxt is not None:
                    click.echo(f"nothing was due at {now.isoformat(timespec='seconds')}; the next slot is "
                               f"{nxt[1].loaded.plan.name} v{nxt[1].loaded.plan.version} at "
                               f"{nxt[0].isoformat(timespec='seconds')}")
            sys.exit(1 if any("refused" in d for d in done) or schedules.skipped else 0)
        if metrics_port is not None:
            from sealflow.runtime.telemetry.metrics import serve_metrics

            try:
                serve_metrics(rt.telemetry.metrics, metrics_port, metrics_addr)
            except OSError as exc:
                fail_usage(f"--metrics-port {metrics_port}: cannot listen on {metrics_addr}:{metrics_port}: {exc}")
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        click.echo(f"scheduler ready: {len(schedules.entries)} scheduled definition(s)")
        code = serve(rt, schedules, stop, tenant=tenant, catch_up=catch_up, drive=not no_drive, as_json=as_json)
    sys.exit(code)


def _report(done: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(done))
        return
    for d in done:
        what = f"refused: {d['refused']}" if "refused" in d else f"submitted run {d['run_id']}, {d['state']}"
        click.echo(f"{d['workflow']} v{d['version']} slot {d['slot']} as {d['run_as']}: {what}")


def register(group: click.Group) -> None:
    group.add_command(scheduler)
