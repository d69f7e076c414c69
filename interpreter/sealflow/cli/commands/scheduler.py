"""`sealflow scheduler`: submit scheduled definitions at their cron slots, as their run_as identity."""

from __future__ import annotations

import datetime as dt
import json
import signal
import sys
import threading

import click

from sealflow.cli import definition_files
from sealflow.cli.definition_files import expand_paths
from sealflow.cli.exits import fail_usage
from sealflow.cli.options import access_option, actions_option, json_flag, store_option, tenant_option
from sealflow.cli.session import open_runtime, project_actions, trust_path, with_demo

SCHEDULER = "service:sealflow-scheduler"


def _parse_at(value: str | None) -> dt.datetime | None:
    if value is None:
        return None
    try:
        at = dt.datetime.fromisoformat(value)
    except ValueError:
        fail_usage(f"--at {value!r} is not an ISO-8601 time (e.g. 2026-11-30T07:00:00+01:00)")
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


def _may_be_scheduled(path) -> bool:
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


def _load(paths, actions, trust):
    plans = []
    for path in expand_paths(paths):
        if not _may_be_scheduled(path):
            continue
        loaded = definition_files.load(str(path), with_demo(actions), trust=trust)
        schedule = loaded.plan.trigger.schedule if loaded.plan.trigger else None
        if schedule:
            plans.append((loaded, schedule))
    if not plans:
        fail_usage("none of the given definitions has a trigger.schedule")
    return plans


def fire(rt, plans, now: dt.datetime, *, tenant: str, catch_up: dt.timedelta, drive: bool) -> list[dict]:
    """Submit every definition whose latest slot is due (idempotently, per slot); return what was done."""
    from sealflow.interpreter.core.errors import StepError
    from sealflow.interpreter.core.schedule import due_slot, slot_key
    from sealflow.interpreter.policy.authz import Unauthorized
    from sealflow.interpreter.store import AdmissionRefused
    from sealflow.interpreter.store.definitions import DefinitionRefused

    done = []
    for loaded, schedule in plans:
        plan = loaded.plan
        slot = due_slot(schedule["cron"], schedule.get("timezone"), now, catch_up)
        if slot is None:
            continue
        key = slot_key(plan.name, plan.version, slot)
        entry = {"workflow": plan.name, "version": plan.version, "slot": slot.isoformat(), "run_as":
                 schedule.get("run_as")}
        try:
            # the definition, its signed bytes and the run are recorded in one transaction, after authorisation
            run_id = rt.submit(plan, {}, initiator=SCHEDULER, tenant=tenant, idempotency_key=key,
                               run_as=schedule.get("run_as"), signer=loaded.signer, source=loaded.source)
        except (Unauthorized, StepError, AdmissionRefused, DefinitionRefused) as exc:
            entry["refused"] = getattr(exc, "message", str(exc))
            done.append(entry)
            continue
        entry["run_id"] = run_id
        entry["state"] = (rt.drive(run_id) if drive else rt.status(run_id)).state
        done.append(entry)
    return done


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
@json_flag(None)
def scheduler(paths, actions, store_url, tenant, access_path, trust, catch_up_s, once, at, no_drive, as_json):
    """Submit scheduled definitions at their cron slots, each run acting as the schedule's run_as.

    Each slot is submitted once (its idempotency key names the definition, version and slot), so
    restarts and several schedulers on one store never submit a slot twice; a missed slot older than
    --catch-up is skipped, not replayed. On the embedded default the runs are driven here.
    """
    from sealflow.interpreter.core.schedule import next_slot

    at_time = _parse_at(at)
    if at_time is not None and not once:
        fail_usage("--at goes with --once")
    trust = trust_path(trust)
    plans = _load(paths, project_actions(actions), trust)
    catch_up = dt.timedelta(seconds=catch_up_s)
    with open_runtime(store_url, actions, access=access_path, trust=trust) as rt:
        if once:
            now = at_time or dt.datetime.now(dt.UTC)
            done = fire(rt, plans, now, tenant=tenant, catch_up=catch_up, drive=not no_drive)
            _report(done, as_json)
            if not done and not as_json:
                nxt = min((next_slot(s["cron"], s.get("timezone"), now), lp.plan.name, lp.plan.version)
                          for lp, s in plans)
                click.echo(f"nothing was due at {now.isoformat(timespec='seconds')}; the next slot is "
                           f"{nxt[1]} v{nxt[2]} at {nxt[0].isoformat(timespec='seconds')}")
            sys.exit(1 if any("refused" in d for d in done) else 0)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        click.echo(f"scheduler ready: {len(plans)} scheduled definition(s)")
        while not stop.is_set():
            now = dt.datetime.now(dt.UTC)
            _report(fire(rt, plans, now, tenant=tenant, catch_up=catch_up, drive=not no_drive), as_json)
            soonest = min(next_slot(s["cron"], s.get("timezone"), now) for _, s in plans)
            stop.wait(max(1.0, min((soonest - now).total_seconds(), 60.0)))


def _report(done: list[dict], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(done))
        return
    for d in done:
        what = f"refused: {d['refused']}" if "refused" in d else f"submitted run {d['run_id']}, {d['state']}"
        click.echo(f"{d['workflow']} v{d['version']} slot {d['slot']} as {d['run_as']}: {what}")


def register(group: click.Group) -> None:
    group.add_command(scheduler)
