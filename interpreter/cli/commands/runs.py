"""Run commands on the embedded default: run, submit, status, approve, reject, cancel, recover.

Exit codes: 0 completed (or the command did what it was asked), 3 waiting,
1 a failed end state (failed, cancelled, timed_out, quarantined) or a refusal,
2 a usage error (bad arguments, unreadable input, unknown run -- or one the caller may not see). ``cancel``
exits 0 once the cancel is accepted, 1 when refused (the run has already ended).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from sealflow.cli import definition_files, render
from sealflow.cli.completion import run_ids
from sealflow.cli.exits import fail_usage, refuse
from sealflow.cli.options import idempotency_option, input_option, on_a_store, tag_option, trust_options
from sealflow.cli.session import (
    act_then_drive,
    find_run,
    import_actions,
    is_shared_store,
    load_access,
    no_run,
    open_runtime,
    project_actions,
    require_policy,
    trust_path,
    with_demo,
)

if TYPE_CHECKING:
    from sealflow.cli.definition_files import Loaded
    from sealflow.dsl.plan import Plan
    from sealflow.runtime.facade import Runtime


def parse_input(raw: str | None) -> Any:
    """``--input``: JSON, or ``@FILE`` holding JSON; None is ``{}``."""
    return {} if raw is None else parse_json(raw, "--input")


def parse_json(raw: str, option: str) -> Any:
    """``option``'s JSON, or ``@FILE`` holding JSON; a usage error saying what is wrong."""
    text = raw
    if raw.startswith("@"):
        try:
            with open(raw[1:], encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            fail_usage(f"{option} {raw}: cannot read: {exc.strerror or exc}")
    try:
        return json.loads(text, parse_constant=_not_json, parse_float=_finite)
    except json.JSONDecodeError as exc:
        fail_usage(f"{option} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except RecursionError:
        fail_usage(f"{option} nests too deeply to be read (lists or maps inside each other thousands of times)")
    except ValueError as exc:
        fail_usage(f"{option}: {exc}")


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is too large to be a number (it would read as infinity)")
    return value


def _submit(rt: Runtime, loaded: Loaded, value: Any, *, principal: str, tenant: str, idempotency_key: str | None,
            pin_version: bool, tags: tuple[tuple[str, str], ...] = ()) -> str:
    """Submit a run of the loaded definition (recording it, atomically); refusals exit 1, invalid input exits 2."""
    from sealflow.core.errors import StepError
    from sealflow.policy.authz import Unauthorized
    from sealflow.runtime.submitting import ModelNotConfigured
    from sealflow.store import AdmissionRefused, IdempotencyConflict

    try:
        return definition_files.submit(rt, loaded, value, initiator=principal, tenant=tenant,
                                       idempotency_key=idempotency_key, pin=pin_version, tags=dict(tags))
    except Unauthorized as exc:
        refuse(f"unauthorized: {exc.message}")
    except StepError as exc:
        fail_usage(exc.message)
    except (IdempotencyConflict, AdmissionRefused, ModelNotConfigured) as exc:
        refuse(exc)


def _ready(rt: Runtime, plan: Plan) -> None:
    """Refuse (exit 1, nothing created) a run this process would execute but lacks a secret, model or action for."""
    from sealflow.runtime.readiness import NotReady, require_ready_plan

    try:
        require_ready_plan(rt, plan)
    except NotReady as exc:
        refuse(exc)


def _load(file: str, actions: tuple[str, ...], trust: str | None, bundle: str | None) -> Loaded:
    import_actions(actions, demo=True)
    return definition_files.load(file, with_demo(project_actions(actions)), trust=trust_path(trust), bundle=bundle)


follow_option = click.option("--follow", is_flag=True, help="Keep showing progress through timers of any length "
                             "until the run ends or waits for a human.")
models_options = (
    click.option("--record", "record", metavar="FILE.jsonl", help="Also write every model call (request and "
                 "answer, secrets redacted) to this JSONL file."),
    click.option("--replay", "replay", metavar="FILE.jsonl", help="Answer model calls from this recording only; "
                 "no provider is called, and a call not in it fails the run."),
)
detach_option = click.option("--detach", is_flag=True, help="Queue the run and return at once (like submit): "
                             "workers or `sealflow recover` drive it.")


@click.command()
@click.argument("file", metavar="FILE")
@input_option
@on_a_store(idempotency_option, tag_option, trust_options, follow_option, detach_option, *models_options, actions=True)
def run(file: str, raw_input: str | None, actions: tuple[str, ...], store_url: str | None, principal: str, tenant: str,
        access_path: str | None, idempotency_key: str | None, tags: tuple[tuple[str, str], ...], trust: str | None,
        bundle: str | None, pin_version: bool, follow: bool, detach: bool, record: str | None, replay: str | None,
        as_json: bool) -> None:
    """Run a definition to its end (or until it waits for a person or a long timer), whichever process
    executes its steps; --detach queues it and returns at once."""
    value = parse_input(raw_input)
    loaded = _load(file, actions, trust, bundle)
    plan = loaded.plan
    with open_runtime(store_url, actions, access=access_path, trust=trust, record=record, replay=replay) as rt:
        if not detach:
            _ready(rt, plan)
        run_id = _submit(rt, loaded, value, principal=principal, tenant=tenant, idempotency_key=idempotency_key,
                         pin_version=pin_version, tags=tags)
        if detach:
            click.echo(json.dumps({"run_id": run_id, "state": rt.status(run_id).state}) if as_json else run_id)
            return
        until = "final" if follow else "settled"
        traces = render.debugging()  # (its initiator may read it; the traceback of a failed action on request)
        if as_json:
            render.finish(rt.drive(run_id, until=until), as_json, traces=traces)
        click.echo(f"run {run_id}: {plan.name} v{plan.version} ({plan.digest[:19]}...) as {principal}")
        render.finish(render.drive_live(rt, run_id, until=until), as_json, header=False, traces=traces)


@click.command()
@click.argument("file", metavar="FILE")
@input_option
@on_a_store(idempotency_option, tag_option, trust_options, actions=True)
def submit(file: str, raw_input: str | None, actions: tuple[str, ...], store_url: str | None, principal: str,
           tenant: str, access_path: str | None, idempotency_key: str | None, tags: tuple[tuple[str, str], ...],
           trust: str | None, bundle: str | None, pin_version: bool, as_json: bool) -> None:
    """Queue a run without driving it; `sealflow recover` (or a worker) drives it."""
    value = parse_input(raw_input)
    provider = load_access(access_path)
    if is_shared_store(store_url):
        require_policy(provider, "submit to a shared store")
    loaded = _load(file, actions, trust, bundle)
    with open_runtime(store_url, actions, access=provider, trust=trust) as rt:
        run_id = _submit(rt, loaded, value, principal=principal, tenant=tenant, idempotency_key=idempotency_key,
                         pin_version=pin_version, tags=tags)
        click.echo(json.dumps({"run_id": run_id, "state": rt.status(run_id).state}) if as_json else run_id)


@click.command()
@click.argument("run_id", metavar="RUN", shell_complete=run_ids)
@on_a_store(click.option("--watch", is_flag=True, help="Drive the run on and show its progress live until it ends "
                         "or waits for a human."),
            click.option("--follow", is_flag=True, help="Follow the run's live feed (what GET /v1/runs/{id}/events "
                         "streams) until it ends or waits for a human, running nothing here: the workers run it."),
            click.option("--children-offset", type=click.IntRange(min=0), default=0, metavar="N",
                         help="With --json: list a fan-out's child runs from the N-th (100 per page)."), actions=True)
def status(run_id: str, actions: tuple[str, ...], store_url: str | None, principal: str, tenant: str,
           access_path: str | None, watch: bool, follow: bool, children_offset: int, as_json: bool) -> None:
    """Show a run: its state, steps, attempts, errors and what it waits for; a map or parallel step's items
    as a count by state with the failures listed (--json: every child run, 100 per page). A step due but
    waiting for a process that has what it needs says what this process lacks too."""
    from sealflow.runtime.readiness import note_left

    with open_runtime(store_url, actions, access=access_path) as rt:
        # (find_run authorised reading the run: its failed steps' tracebacks are shown)
        found = note_left(rt, find_run(rt, run_id, tenant, principal, children_offset=children_offset))
        if watch and follow:
            fail_usage("--watch drives the run here, --follow only follows it: choose one")
        if follow and found.state not in render.FAILED_STATES | {"completed"}:
            if not as_json:
                render.print_header(found)
                click.echo(f"following {run_id}: the workers run its steps (sealflow worker), nothing runs here; "
                           "Ctrl-C stops following, not the run (--watch drives it here instead)", err=True)
            followed = render.follow_live(rt, run_id, echo=not as_json)
            render.finish(note_left(rt, followed), as_json, header=as_json, traces=True)
        if watch and found.state not in render.FAILED_STATES | {"completed"}:
            if as_json:
                render.finish(rt.drive(run_id, until="final"), as_json, traces=True)
            render.print_header(found)
            render.finish(render.drive_live(rt, run_id, until="final"), as_json, header=False, traces=True)
        render.finish(found, as_json, traces=True)


@click.command()
@click.argument("run_id", metavar="RUN", shell_complete=run_ids)
@click.option("--step", "step_id", metavar="STEP", help="The approval step (default: the one waiting).")
@click.option("--comment", help="Why you approve (recorded in the audit trail).")
@click.option("--edit", "edit_json", metavar="JSON", help="At an editable gate: the payload as you changed it (JSON, "
              "checked by the gate's editable schema); you approve the edited payload.")
@on_a_store(actions=True)
def approve(run_id: str, step_id: str | None, comment: str | None, edit_json: str | None, actions: tuple[str, ...],
            store_url: str | None, principal: str, tenant: str, access_path: str | None, as_json: bool) -> None:
    """Approve a run waiting at an approval gate, then drive it on."""
    from sealflow.policy.approvals import NO_EDIT

    edit = NO_EDIT
    if edit_json is not None:
        try:
            edit = json.loads(edit_json)
        except ValueError as exc:
            fail_usage(f"--edit is not JSON: {exc}")
    with open_runtime(store_url, actions, access=access_path) as rt:
        act_then_drive(rt, run_id, principal, tenant, as_json,
                       lambda rt: rt.approve(run_id, step_id, actor=principal, tenant=tenant, comment=comment,
                                             edit=edit))


@click.command()
@click.argument("run_id", metavar="RUN", shell_complete=run_ids)
@click.option("--step", "step_id", metavar="STEP")
@click.option("--reason", required=True, help="Why (required; recorded in the audit trail).")
@on_a_store(actions=True)
def reject(run_id: str, step_id: str | None, reason: str, actions: tuple[str, ...], store_url: str | None,
           principal: str, tenant: str, access_path: str | None, as_json: bool) -> None:
    """Reject a run waiting at an approval gate (the step fails with policy_denied), then drive it on."""
    with open_runtime(store_url, actions, access=access_path) as rt:
        act_then_drive(rt, run_id, principal, tenant, as_json,
                       lambda rt: rt.reject(run_id, step_id, actor=principal, tenant=tenant, reason=reason))


@click.command()
@click.argument("run_id", metavar="RUN", shell_complete=run_ids)
@click.option("--retry", "decision", flag_value="retry", help="Run the lost attempt again (you checked that it did "
              "not act, or a second effect is acceptable).")
@click.option("--succeeded", "decision", flag_value="succeeded", help="It acted: the step succeeds with --output.")
@click.option("--failed", "decision", flag_value="failed", help="It failed: the step fails with worker_lost (not "
              "retried; an on_error route may take it).")
@click.option("--output", "output_text", metavar="JSON|@FILE", help="With --succeeded: the step's output (JSON, or "
              "@file), checked as the step's output is.")
@click.option("--reason", required=True, help="What you checked (required; recorded in the audit trail).")
@on_a_store(actions=True)
def resolve(run_id: str, decision: str | None, output_text: str | None, reason: str, actions: tuple[str, ...],
            store_url: str | None, principal: str, tenant: str, access_path: str | None, as_json: bool) -> None:
    """Decide the outcome of a lost attempt that waits for a person: an action that cannot deduplicate
    (honours_idempotency_key=False) whose worker was lost mid-call may or may not have acted. Needs
    runs:resolve in the run's tenant. Then drive the run on."""
    if decision is None:
        fail_usage("choose one of --retry, --succeeded or --failed")
    output = None
    if output_text is not None:
        if decision != "succeeded":
            fail_usage("--output goes with --succeeded only")
        output = parse_json(output_text, "--output")
    with open_runtime(store_url, actions, access=access_path) as rt:
        act_then_drive(rt, run_id, principal, tenant, as_json,
                       lambda rt: rt.resolve(run_id, decision, actor=principal, tenant=tenant, reason=reason,
                                             output=output))


@click.command()
@click.argument("run_id", metavar="RUN", shell_complete=run_ids)
@click.option("--reason", default="")
@on_a_store(actions=True)
def cancel(run_id: str, reason: str, actions: tuple[str, ...], store_url: str | None, principal: str, tenant: str,
           access_path: str | None, as_json: bool) -> None:
    """Cancel a run: no new step starts; a running action sees ctx.cancelled(). Exit 0 when the cancel is
    accepted, 1 when it is refused (the run has ended; it says so), 2 for a run you may not see."""
    from sealflow.core.errors import StepError
    from sealflow.store import InvalidOperation, NotFound

    with open_runtime(store_url, actions, access=access_path) as rt:
        try:
            rt.cancel(run_id, actor=principal, reason=reason, tenant=tenant)
        except NotFound:
            no_run(run_id)
        except InvalidOperation as exc:
            refuse(exc)
        except StepError as exc:
            fail_usage(exc.message)
        status = rt.drive(run_id)
        if as_json:
            click.echo(json.dumps(render.status_dict(status), indent=2, ensure_ascii=False, default=str))
        else:
            render.print_header(status)
            render.print_timeline(status)
            render.print_outcome(status)
        sys.exit(0)


@click.command()
@on_a_store(actions=True)
def recover(actions: tuple[str, ...], store_url: str | None, principal: str, tenant: str, access_path: str | None,
            as_json: bool) -> None:
    """Find runs in flight (after a crash, or with due timers) and drive the tenant's on. A run this process
    cannot continue (it lacks an action module, a model, a secret or the trust policy) is left as it is and
    listed with what it lacks; a run whose stored plan does not match its digest is refused (its due step
    fails it into the dead-letter list, as on any process) and listed with the reason; exit 0 once it
    recovered every run it could. The report names only runs of --tenant that you may read."""
    with open_runtime(store_url, actions, access=access_path) as rt:
        report = rt.recover(actor=principal, tenant=tenant, leave_unready=True)
        left = {entry["run_id"] for entry in report["runs_left"]}
        refused = {entry["run_id"]: entry for entry in report["runs_refused"]}
        touched = [r for r in dict.fromkeys(report["runs_repaired"] + report["runs_in_flight"]) if r not in left]
        results = {run_id: rt.drive(run_id).state for run_id in touched if run_id not in refused}
        for run_id, entry in refused.items():  # driven too: the engine refuses a due step of such a run
            entry["state"] = rt.drive(run_id).state
        if as_json:
            click.echo(json.dumps({"report": report, "runs": results, "left": report["runs_left"],
                                   "refused": report["runs_refused"]}, indent=2, default=str))
        else:
            render.print_recovered(results, report)


def register(group: click.Group) -> None:
    for command in (run, submit, status, approve, reject, resolve, cancel, recover):
        group.add_command(command)
