"""Run commands on the embedded default: run, submit, status, approve, reject, cancel, recover, dlq, audit.

Exit codes: 0 completed (or the command did what it was asked), 3 waiting,
1 a failed end state (failed, cancelled, timed_out, quarantined) or a refusal,
2 a usage error (bad arguments, unreadable input, unknown run).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import logging
import os
import sys
import time
from typing import Any

import click

from sealflow.cli import controls
from sealflow.cli import loading
from sealflow.cli.lang import actions_option
from sealflow.cli.output import fail_usage
from sealflow.cli.security import access_option, check_principal_option, is_shared_store, load_access, require_policy, tenant_option

FAILED_STATES = {"failed", "cancelled", "timed_out", "quarantined"}

store_option = click.option("--store", "store_url", metavar="URL", envvar="SEALFLOW_STORE",
                            help="State store (sqlite:///PATH). Default: $SEALFLOW_STORE or sqlite:///.sealflow/state.db")
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


def trust_options(fn):
    """--trust POLICY, --bundle PATH, --pin-version: load only what a trusted signer signed (docs/trust.md)."""
    fn = click.option("--pin-version", is_flag=True,
                      help="Operator override: run this version although a newer one ran on this store (audited).")(fn)
    fn = click.option("--bundle", metavar="PATH", help="The signature file (default: FILE.sigstore.json or "
                      "FILE.dsse.json beside it).")(fn)
    return click.option("--trust", metavar="POLICY", envvar="SEALFLOW_TRUST",
                        help="Trust policy: run the file only if its signature verifies (offline). Without it, "
                        "development mode: the run records 'unsigned'.")(fn)


def default_principal() -> str:
    try:
        return "user:" + (os.environ.get("SEALFLOW_USER") or getpass.getuser())
    except Exception:  # no login name in some containers
        return "user:local"


as_option = click.option("--as", "principal", metavar="PRINCIPAL", default=default_principal,
                         callback=check_principal_option,
                         help="Who acts: user:NAME or service:NAME (default: user:$SEALFLOW_USER, else the local "
                              "user).")


def parse_input(raw: str | None) -> Any:
    if raw is None:
        return {}
    text = raw
    if raw.startswith("@"):
        try:
            with open(raw[1:], encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            fail_usage(f"--input {raw}: cannot read: {exc.strerror or exc}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        fail_usage(f"--input is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")


def _import_actions(actions: tuple[str, ...]) -> None:
    import sealflow.demo  # noqa: F401  (the built-in demo world registers its actions)
    from sealflow.cli.actions_loader import ActionsLoadError, import_actions

    try:
        import_actions(actions)
    except ActionsLoadError as exc:
        fail_usage(str(exc))


@contextlib.contextmanager
def open_runtime(store_url: str | None, actions: tuple[str, ...] = (), *, access: Any = None):
    """A Runtime on the given store, with demo actions and ``--actions`` modules registered, under the
    access policy ``access`` (a file, a provider; None: ``$SEALFLOW_ACCESS``, else open development mode)."""
    provider = access if access is not None and not isinstance(access, str) else load_access(access)
    _import_actions(actions)
    from sealflow.interpreter.service.runtime import Runtime
    from sealflow.interpreter.store import StoreError

    url = store_url or os.environ.get("SEALFLOW_STORE")
    if url is None:
        os.makedirs(".sealflow", exist_ok=True)
    # the command line has said so itself (load_access): no second copy from the runtime's logger
    logging.getLogger("sealflow.access").setLevel(logging.ERROR)
    try:
        rt = Runtime(url, access=provider, config=controls.load_config())
    except StoreError as exc:
        fail_usage(str(exc))
    try:
        yield rt
    finally:
        rt.close()


def _steps(status) -> list[dict]:
    """One entry per step (gates included), in the order they first ran."""
    steps: dict[str, dict] = {}
    for a in status.attempts:
        entry = steps.setdefault(a.step_id, {"id": a.step_id, "state": a.state, "attempts": 0})
        entry["attempts"] = max(entry["attempts"], a.attempt)
        entry["state"] = a.state
        if a.error_class:
            entry["error"] = {"class": a.error_class, "message": a.error_message}
        elif "error" in entry and a.state == "succeeded":
            del entry["error"]
    return list(steps.values())


def status_dict(status) -> dict:
    run = status.run
    out = {"run_id": run.id, "state": run.state, "workflow": run.workflow, "version": run.workflow_version,
           "plan_digest": run.plan_digest, "tenant": run.tenant, "initiator": run.initiator, "output": run.output,
           "steps": _steps(status)}
    if getattr(run, "signer", None):
        out["signer"] = run.signer
    if getattr(run, "acting_as", None) not in (None, run.initiator):
        out["acting_as"] = run.acting_as
    if getattr(run, "access_mode", None):
        out["access"] = run.access_mode
    if run.error_class:
        out["error"] = {"class": run.error_class, "message": run.error_message}
    if status.waiting:
        out["waiting"] = status.waiting
    out["usage"] = {"steps": run.steps_executed, "tokens": run.tokens, "cost_usd": run.cost_usd,
                    "tool_calls": run.tool_calls}
    return out


def _ms(a) -> str:
    if a.started_at and a.ended_at:
        return f"{(a.ended_at - a.started_at) * 1000:.0f}ms"
    return ""


def print_timeline(status, *, since: int = 0) -> None:
    for a in status.attempts[since:]:
        tries = f"attempt {a.attempt}"
        line = f"  {a.step_id:<24} {tries:<10} {a.state:<10} {_ms(a):>7}"
        if a.error_class:
            line += f"  {a.error_class}: {a.error_message}"
        if a.state in ("retry_wait", "waiting") and a.due_at:
            line += f"  (due in {max(a.due_at - time.time(), 0):.1f}s)"
        click.echo(line)


_ENDED = ("succeeded", "failed", "timed_out", "skipped", "cancelled", "retry_wait", "waiting")


class LiveTimeline:
    """Prints each attempt as it starts and as it ends, read from the store while the run is driven."""

    def __init__(self) -> None:
        self.shown: dict[tuple[str, int], str] = {}

    def update(self, status) -> None:
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


def drive_live(rt, run_id: str):
    """Drive the run on a background thread, printing its steps as they start and end; the final status."""
    import threading

    done: dict = {}

    def work() -> None:
        try:
            done["status"] = rt.drive(run_id)
        except BaseException as exc:  # re-raised on the calling thread
            done["error"] = exc

    timeline = LiveTimeline()
    thread = threading.Thread(target=work, name="sealflow-drive", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
        if thread.is_alive():
            timeline.update(rt.status(run_id))
    if "error" in done:
        raise done["error"]
    timeline.update(done["status"])
    return done["status"]


def print_status(status) -> None:
    d = status_dict(status)
    click.echo(f"run {d['run_id']}  {d['workflow']} v{d['version']}  {d['plan_digest'][:19]}...  "
               f"initiator {d['initiator']}")
    print_timeline(status)
    click.echo(f"state: {d['state']}")
    if "error" in d:
        click.echo(f"error: {d['error']['class']}: {d['error']['message']}")
    if status.waiting:
        w = status.waiting
        if w.get("kind") == "approval":
            click.echo(f"waiting for approval at {w['step']} by {', '.join(w.get('approvers') or [])} "
                       f"(quorum {w.get('quorum')}); answer with: sealflow approve {d['run_id']}  or  "
                       f"sealflow reject {d['run_id']} --reason TEXT")
        else:
            click.echo(f"waiting ({w.get('kind')}) at {w['step']}; `sealflow recover` drives it on when due")
    if d["state"] == "completed":
        click.echo("output: " + json.dumps(d["output"], ensure_ascii=False))


def finish(status, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(status_dict(status), indent=2, ensure_ascii=False, default=str))
    else:
        print_status(status)
    state = status.state
    sys.exit(0 if state == "completed" else 3 if state == "waiting" else 1 if state in FAILED_STATES else 3)


def _get_status(rt, run_id: str, tenant: str | None = None, actor: str | None = None):
    from sealflow.interpreter.store import NotFound

    try:
        return rt.status(run_id, tenant=tenant, actor=actor)
    except NotFound:  # a run of another tenant reads exactly like an unknown one
        fail_usage(f"no run {run_id!r} in this store; list dead letters with `sealflow dlq list`")


def _refuse(exc: Exception) -> None:
    click.echo(f"sealflow: refused: {exc}", err=True)
    sys.exit(1)


def _submit(rt, loaded, value, *, principal: str, tenant: str, idempotency_key: str | None, pin_version: bool) -> str:
    """Record the loaded definition and submit a run of it; refusals exit 1, invalid input exits 2."""
    from sealflow.interpreter.policy.authz import Unauthorized
    from sealflow.interpreter.core.errors import StepError
    from sealflow.interpreter.store import AdmissionRefused, IdempotencyConflict

    try:
        loading.record(rt, loaded, pin=pin_version, actor=principal)
        return rt.submit(loaded.plan, value, initiator=principal, tenant=tenant, idempotency_key=idempotency_key,
                         signer=loaded.signer)
    except Unauthorized as exc:
        _refuse(f"unauthorized: {exc.message}")
    except StepError as exc:
        fail_usage(exc.message)
    except (IdempotencyConflict, AdmissionRefused) as exc:
        _refuse(exc)


@click.command()
@click.argument("file", metavar="FILE")
@click.option("--input", "raw_input", metavar="JSON|@FILE", help="The run's input, as JSON or @path/to/file.json.")
@actions_option
@store_option
@as_option
@tenant_option
@access_option
@click.option("--idempotency-key", metavar="KEY", help="Submitting again with the same key returns the same run.")
@trust_options
@json_option
def run(file, raw_input, actions, store_url, principal, tenant, access_path, idempotency_key, trust, bundle,
        pin_version, as_json):
    """Run a definition to its end (or until it waits) on the embedded default."""
    value = parse_input(raw_input)
    _import_actions(actions)
    loaded = loading.load(file, ("sealflow.demo",) + tuple(actions), trust=trust, bundle=bundle)
    plan = loaded.plan
    with open_runtime(store_url, actions, access=access_path) as rt:
        run_id = _submit(rt, loaded, value, principal=principal, tenant=tenant, idempotency_key=idempotency_key,
                         pin_version=pin_version)
        if not as_json:
            click.echo(f"run {run_id}: {plan.name} v{plan.version} ({plan.digest[:19]}...) as {principal}")
        status = rt.drive(run_id) if as_json else drive_live(rt, run_id)
        if not as_json:
            click.echo(f"state: {status.state}")
            if status.run.error_class:
                click.echo(f"error: {status.run.error_class}: {status.run.error_message}")
            if status.state == "completed":
                click.echo("output: " + json.dumps(status.output, ensure_ascii=False, default=str))
            elif status.waiting and status.waiting.get("kind") == "approval":
                click.echo(f"waiting for approval by {', '.join(status.waiting.get('approvers') or [])}: "
                           f"sealflow approve {run_id}  |  sealflow reject {run_id} --reason TEXT")
            sys.exit(0 if status.state == "completed" else 3 if status.state == "waiting" else 1)
        finish(status, as_json)


@click.command()
@click.argument("file", metavar="FILE")
@click.option("--input", "raw_input", metavar="JSON|@FILE")
@actions_option
@store_option
@as_option
@tenant_option
@access_option
@click.option("--idempotency-key", metavar="KEY")
@trust_options
@json_option
def submit(file, raw_input, actions, store_url, principal, tenant, access_path, idempotency_key, trust, bundle,
           pin_version, as_json):
    """Queue a run without driving it; `sealflow recover` (or a worker) drives it."""
    value = parse_input(raw_input)
    provider = load_access(access_path)
    if is_shared_store(store_url):
        require_policy(provider, "submit to a shared store")
    _import_actions(actions)
    loaded = loading.load(file, ("sealflow.demo",) + tuple(actions), trust=trust, bundle=bundle)
    with open_runtime(store_url, actions, access=provider) as rt:
        run_id = _submit(rt, loaded, value, principal=principal, tenant=tenant, idempotency_key=idempotency_key,
                         pin_version=pin_version)
        click.echo(json.dumps({"run_id": run_id, "state": rt.status(run_id).state}) if as_json else run_id)


@click.command()
@click.argument("run_id", metavar="RUN")
@store_option
@as_option
@tenant_option
@access_option
@json_option
def status(run_id, store_url, principal, tenant, access_path, as_json):
    """Show a run: its state, steps, attempts, errors and what it waits for."""
    with open_runtime(store_url, access=access_path) as rt:
        finish(_get_status(rt, run_id, tenant, principal), as_json)


def _drive_after(rt, run_id: str, as_json: bool) -> None:
    finish(rt.drive(run_id), as_json)


def _decide(run_id, actions, store_url, principal, tenant, access_path, as_json, decision) -> None:
    """Answer an approval gate as ``principal`` (refusals exit 1), then drive the run on."""
    from sealflow.interpreter.policy.authz import Unauthorized
    from sealflow.interpreter.store import InvalidOperation

    with open_runtime(store_url, actions, access=access_path) as rt:
        _get_status(rt, run_id, tenant, principal)
        try:
            decision(rt)
        except Unauthorized as exc:
            _refuse(f"unauthorized: {exc.message}")
        except InvalidOperation as exc:
            _refuse(exc)
        _drive_after(rt, run_id, as_json)


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option("--step", "step_id", metavar="STEP", help="The approval step (default: the one waiting).")
@click.option("--comment", help="Why you approve (recorded in the audit trail).")
@actions_option
@store_option
@as_option
@tenant_option
@access_option
@json_option
def approve(run_id, step_id, comment, actions, store_url, principal, tenant, access_path, as_json):
    """Approve a run waiting at an approval gate, then drive it on."""
    _decide(run_id, actions, store_url, principal, tenant, access_path, as_json,
            lambda rt: rt.approve(run_id, step_id, actor=principal, tenant=tenant, comment=comment))


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option("--step", "step_id", metavar="STEP")
@click.option("--reason", required=True, help="Why (required; recorded in the audit trail).")
@actions_option
@store_option
@as_option
@tenant_option
@access_option
@json_option
def reject(run_id, step_id, reason, actions, store_url, principal, tenant, access_path, as_json):
    """Reject a run waiting at an approval gate (the step fails with policy_denied), then drive it on."""
    _decide(run_id, actions, store_url, principal, tenant, access_path, as_json,
            lambda rt: rt.reject(run_id, step_id, actor=principal, tenant=tenant, reason=reason))


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option("--reason", default="")
@actions_option
@store_option
@as_option
@tenant_option
@access_option
@json_option
def cancel(run_id, reason, actions, store_url, principal, tenant, access_path, as_json):
    """Cancel a run: no new step starts; a running action sees ctx.cancelled()."""
    from sealflow.interpreter.store import InvalidOperation

    with open_runtime(store_url, actions, access=access_path) as rt:
        _get_status(rt, run_id, tenant, principal)
        try:
            rt.cancel(run_id, actor=principal, reason=reason, tenant=tenant)
        except InvalidOperation as exc:
            _refuse(exc)
        _drive_after(rt, run_id, as_json)


@click.command()
@actions_option
@store_option
@as_option
@tenant_option
@access_option
@json_option
def recover(actions, store_url, principal, tenant, access_path, as_json):
    """Find runs in flight (after a crash, or with due timers) and drive the tenant's on."""
    with open_runtime(store_url, actions, access=access_path) as rt:
        report = rt.recover()
        touched = list(dict.fromkeys(report.get("runs_repaired", [])))
        for run_id in rt.store.active_runs() if hasattr(rt.store, "active_runs") else touched:
            if run_id not in touched:
                touched.append(run_id)
        touched = [r for r in touched if rt.store.get_run(r).tenant == tenant]
        results = {run_id: rt.drive(run_id).state for run_id in touched}
        if as_json:
            click.echo(json.dumps({"report": report, "runs": results}, indent=2, default=str))
        else:
            click.echo(f"recovered: {len(results)} run(s) in flight")
            for run_id, state in results.items():
                click.echo(f"  {run_id}: {state}")


@click.group()
def dlq():
    """The dead-letter list: runs that failed for good, and redrives."""


@dlq.command("list")
@store_option
@as_option
@tenant_option
@access_option
@json_option
def dlq_list(store_url, principal, tenant, access_path, as_json):
    """List the tenant's dead-lettered runs."""
    import dataclasses

    with open_runtime(store_url, access=access_path) as rt:
        letters = rt.dlq_list(tenant=tenant)
        if as_json:
            click.echo(json.dumps([dataclasses.asdict(x) for x in letters], indent=2, default=str))
            return
        if not letters:
            click.echo("the dead-letter list is empty")
        for x in letters:
            flag = " QUARANTINED" if getattr(x, "quarantined", False) else ""
            click.echo(f"{x.run_id}  {x.reason}{flag}")


@dlq.command("show")
@click.argument("run_id", metavar="RUN")
@store_option
@as_option
@tenant_option
@access_option
@json_option
def dlq_show(run_id, store_url, principal, tenant, access_path, as_json):
    """Show a dead-lettered run: why, its failed attempts, recent audit events."""
    from sealflow.interpreter.store import InvalidOperation

    with open_runtime(store_url, access=access_path) as rt:
        _get_status(rt, run_id, tenant, principal)
        try:
            detail = rt.dlq_show(run_id, tenant=tenant, actor=principal)
        except InvalidOperation as exc:
            fail_usage(str(exc))
        click.echo(json.dumps(detail, indent=2, default=str, ensure_ascii=False))


@dlq.command("redrive")
@click.argument("run_id", metavar="RUN")
@actions_option
@store_option
@as_option
@tenant_option
@access_option
@json_option
def dlq_redrive(run_id, actions, store_url, principal, tenant, access_path, as_json):
    """Rerun a dead-lettered run from its failed step, on its original plan."""
    from sealflow.interpreter.store import InvalidOperation

    with open_runtime(store_url, actions, access=access_path) as rt:
        _get_status(rt, run_id, tenant, principal)
        try:
            rt.dlq_redrive(run_id, actor=principal, tenant=tenant)
        except InvalidOperation as exc:
            _refuse(exc)
        _drive_after(rt, run_id, as_json)


@click.command()
@click.argument("run_id", metavar="RUN")
@store_option
@as_option
@tenant_option
@access_option
@json_option
def audit(run_id, store_url, principal, tenant, access_path, as_json):
    """Print a run's audit trail, oldest first."""
    import dataclasses

    with open_runtime(store_url, access=access_path) as rt:
        _get_status(rt, run_id, tenant, principal)
        events = rt.audit(run_id, tenant=tenant, actor=principal)
        if as_json:
            click.echo(json.dumps([dataclasses.asdict(e) for e in events], indent=2, default=str))
            return
        for e in events:
            d = dataclasses.asdict(e)
            when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(d.get("at") or d.get("ts") or 0))
            rest = {k: v for k, v in d.items() if k not in ("id", "run_id", "at", "ts", "event", "step_id", "actor")
                    and k not in controls.CHAIN_BOOKKEEPING and v not in (None, {}, "")}
            click.echo(f"{when}  {d.get('event'):<22} {d.get('step_id') or '-':<22} {d.get('actor') or '-':<16} "
                       f"{json.dumps(rest, default=str)}")


def register(group: click.Group) -> None:
    for command in (run, submit, status, approve, reject, cancel, recover, dlq, controls.audit_group(audit)):
        group.add_command(command)
