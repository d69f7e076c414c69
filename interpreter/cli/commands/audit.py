"""``sealflow audit``: a run's audit trail, and the check of the hash chains.

``audit`` is a group whose default is the run's trail::

    sealflow audit RUN                     # a run's audit trail, oldest first (``audit show RUN``)
    sealflow audit verify [--tenant T]     # walk the hash chains you may read; exit 1 naming the first bad event
        [--anchor FILE [--public-key PUB]] # ... and check they still extend an anchor taken earlier
    sealflow audit head [--json [--key K]] # the chains' heads: an anchor to keep outside the store
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sealflow.cli import render
from sealflow.cli.completion import run_ids
from sealflow.cli.exits import fail, fail_usage, refuse
from sealflow.cli.options import access_option, any_tenant_option, as_option, json_option, on_a_store, store_option
from sealflow.cli.session import load_access, no_run, open_runtime, open_store

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    from sealflow.policy.access import AccessProvider
    from sealflow.store.auditverify import ChainReport
    from sealflow.store.base import Store


class _AuditGroup(click.Group):
    """``audit RUN`` is ``audit show RUN``; ``audit verify`` and ``audit head`` are the chain's commands."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["show", *args]
        return super().parse_args(ctx, args)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """`audit <TAB>`: its commands and the newest run ids (`audit RUN` is `audit show RUN`)."""
        return super().shell_complete(ctx, incomplete) + run_ids(ctx, None, incomplete)


@click.group(cls=_AuditGroup)
def audit() -> None:
    """The audit trail: `audit RUN` prints a run's events; `audit verify` checks the hash chains; `audit head`
    prints their heads (an anchor to keep elsewhere)."""


@audit.command("show")
@click.argument("run_id", metavar="RUN", shell_complete=run_ids)
@on_a_store()
def show(run_id: str, store_url: str | None, principal: str, tenant: str, access_path: str | None,
         as_json: bool) -> None:
    """Print a run's audit trail, oldest first (needs audit:read in the run's tenant)."""
    from sealflow.store import NotFound

    with open_runtime(store_url, access=access_path) as rt:
        try:
            events = rt.audit(run_id, tenant=tenant, actor=principal)
        except NotFound:  # unknown, or not the caller's to read: one answer
            no_run(run_id)
        render.print_audit(events, as_json)


def _verify_readable(store: Store, access: AccessProvider, principal: str, tenant: str | None) -> ChainReport:
    """The chain report over the chains ``principal`` may read (operators and open mode: all)."""
    from sealflow.policy.operations import readable_chains
    from sealflow.store.auditchain import ChainReport
    from sealflow.store.auditchain import verify as verify_chain

    chains = readable_chains(store, access, principal, tenant)
    if chains is None:
        return verify_chain(store, tenant)
    report = ChainReport()
    for name in chains:
        part = verify_chain(store, name)
        report.events.update(part.events)
        report.heads.update(part.heads)
        report.breaks.extend(part.breaks)
    return report


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        fail_usage(f"{what} {path}: {exc.strerror or exc}")


def _load_anchor(anchor_path: str | None, public_key: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The anchor document (its signature checked when a public key is given) and the signer's key id."""
    from sealflow.dsl.trust.signing import SigningError
    from sealflow.store import auditanchor

    if public_key and not anchor_path:
        fail_usage("--public-key checks an anchor's signature: give the anchor with --anchor FILE")
    if not anchor_path:
        return None, None
    try:
        anchor = auditanchor.load(_read(anchor_path, "anchor"), anchor_path)
        signer = auditanchor.check_signature(anchor, _read(public_key, "public key"), anchor_path, public_key) \
            if public_key else None
    except (auditanchor.AnchorError, SigningError) as exc:
        fail(str(exc))
    return anchor, signer


def _check_anchor(store: Store, report: ChainReport, anchor: dict[str, Any], tenant: str | None) -> None:
    """Add to ``report`` each anchored tenant that was cut, wiped or rewritten since the anchor."""
    from sealflow.store import auditanchor
    from sealflow.store.auditverify import UNCHAINED

    for b in auditanchor.check(store, anchor, tenant):
        report.breaks.append(b)
        label = UNCHAINED if b.tenant is None else b.tenant  # (as verify names them; an anchor's are all named)
        report.events.setdefault(label, 0)  # a wiped tenant has no chain left to list
        report.heads.setdefault(label, "")


@audit.command("verify")
@store_option
@as_option
@any_tenant_option
@access_option
@click.option("--anchor", "anchor_path", metavar="FILE",
              help="Also check each chain still extends this anchor (from `audit head --json`).")
@click.option("--public-key", "public_key", metavar="PUB",
              help="Check the anchor's signature with this Ed25519 public key (sealflow keygen's .pub.pem).")
@json_option
def verify(store_url: str | None, principal: str, tenant: str | None, access_path: str | None, anchor_path: str | None,
           public_key: str | None, as_json: bool) -> None:
    """Verify the audit chains you may read (audit:read in their tenant; an operator: all): exit 0 when
    intact, 1 naming the first edited, deleted, inserted or reordered event (with --anchor: or a tenant
    cut, wiped or rewritten since the anchor)."""
    from sealflow.policy.operations import may_see_tenant

    provider = load_access(access_path)
    if tenant is not None and not may_see_tenant(provider, tenant, principal, "audit:read"):
        refuse(f"{principal} may not read the audit chain of tenant {tenant!r} (it needs audit:read there, or "
               "to be an operator of the access policy)")
    anchor, signer = _load_anchor(anchor_path, public_key)
    url = store_url or os.environ.get("SEALFLOW_STORE")
    if url is None and not os.path.exists(".sealflow/state.db"):
        fail_usage("no state store here (.sealflow/state.db); pass --store sqlite:///PATH")
    store = open_store(url)
    try:
        report = _verify_readable(store, provider, principal, tenant)
        if anchor is not None:
            _check_anchor(store, report, anchor, tenant)
    finally:
        store.close()
    first = report.first
    if as_json:
        click.echo(json.dumps({"ok": report.ok, "events": report.events, "heads": report.heads,
                               "first_break": None if first is None else {
                                   "tenant": first.tenant, "event_id": first.event_id, "seq": first.seq,
                                   "problem": first.problem, "message": first.message},
                               "breaks": len(report.breaks),
                               **({} if anchor is None else {"anchor": {
                                   "file": anchor_path, "tenants": len(anchor["tenants"]),
                                   "signed": "signature" in anchor, "signature_checked_with": signer}})},
                              indent=2))
    else:
        for name in sorted(report.events):
            broken = next((b for b in report.breaks if (b.tenant if b.tenant is not None else "(no tenant)") == name),
                          None)
            mark = "BROKEN" if broken else "ok"
            click.echo(f"{mark:<7} tenant {name or '(system)'}: {report.events[name]} events, head "
                       f"{(report.heads[name] or '-')[:16]}")
        if anchor is not None:
            how = f"signature verified (key {signer[:16]})" if signer else \
                ("signed, signature NOT checked (pass --public-key)" if "signature" in anchor else "unsigned")
            click.echo(f"anchor {anchor_path}: {len(anchor['tenants'])} tenant(s), {how}")
        if first is not None:
            click.echo(f"sealflow: audit chain broken: tenant {first.tenant or '(system)'}: {first.message}",
                       err=True)
        elif not report.events:
            click.echo("no audit events")
    sys.exit(0 if report.ok else 1)


@audit.command("head")
@store_option
@as_option
@any_tenant_option
@access_option
@click.option("--key", "key_path", metavar="KEY",
              help="Sign the anchor with this Ed25519 private key (sealflow keygen's .pem); needs --json.")
@json_option
def head(store_url: str | None, principal: str, tenant: str | None, access_path: str | None, key_path: str | None,
         as_json: bool) -> None:
    """Print the head (hash, event count, time) of each chain you may read (audit:read in its tenant; an
    operator: all): with --json, an anchor document to keep outside the store (`audit verify --anchor FILE`
    checks the chains still extend it)."""
    from sealflow.dsl.trust.signing import SigningError
    from sealflow.policy.operations import may_see_tenant, readable_chains
    from sealflow.store import auditanchor

    provider = load_access(access_path, quiet=True)
    if tenant is not None and not may_see_tenant(provider, tenant, principal, "audit:read"):
        refuse(f"{principal} may not read the audit chain of tenant {tenant!r} (it needs audit:read there, or "
               "to be an operator of the access policy)")

    if key_path and not as_json:
        fail_usage("--key signs the anchor document: add --json (and keep its output outside the store)")
    key = _read(key_path, "key") if key_path else None
    url = store_url or os.environ.get("SEALFLOW_STORE")
    if url is None and not os.path.exists(".sealflow/state.db"):
        fail_usage("no state store here (.sealflow/state.db); pass --store sqlite:///PATH")
    store = open_store(url)
    try:
        doc = auditanchor.take(store, time.time(), tenant, only=readable_chains(store, provider, principal, tenant))
    except auditanchor.AnchorError as exc:
        fail(str(exc))
    finally:
        store.close()
    if key is not None and key_path:  # (a key is read only from a --key path)
        try:
            doc = auditanchor.sign(doc, key, key_path)
        except SigningError as exc:
            fail(str(exc))
    if as_json:
        click.echo(auditanchor.dumps(doc))
        return
    for name, h in sorted(doc["tenants"].items()):
        click.echo(f"tenant {name or '(system)'}: {h['count']} events, head {h['head_hash']}")
    if not doc["tenants"]:
        click.echo("no audit events")


def register(group: click.Group) -> None:
    group.add_command(audit)
