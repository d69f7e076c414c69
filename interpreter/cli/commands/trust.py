"""Trust commands: keygen, sign, verify, diff.

Sigstore is imported only by keyless ``sign`` and by ``verify`` of a Sigstore bundle;
nothing here runs at import time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sealflow.cli.definition_files import expand_paths
from sealflow.cli.diagnostics import emit_diagnostics, github_escape
from sealflow.cli.exits import fail, fail_usage, refuse
from sealflow.cli.git_files import GitError, files_at_ref, working_files
from sealflow.cli.options import actions_option
from sealflow.cli.session import load_action_metadata

if TYPE_CHECKING:  # the CLI imports the language lazily, per command
    from sealflow.dsl.api import CheckResult
    from sealflow.dsl.diff import Finding, Side
    from sealflow.dsl.plan import Plan
    from sealflow.dsl.trust import Refused, Verified
    from sealflow.dsl.typecheck import ProjectFacts

def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


# ---------------------------------------------------------------- keygen

def _work_tree(folder: Path) -> Path | None:
    """The git work tree ``folder`` lies in, if any (found by walking up to a ``.git``)."""
    for candidate in (folder.resolve(), *folder.resolve().parents):
        if (candidate / ".git").exists():
            return candidate
    return None


@click.command()
@click.option("--out", "prefix", required=True, metavar="PREFIX",
              help="Write PREFIX.pem (private, mode 0600) and PREFIX.pub.pem.")
@click.option("--force", is_flag=True, help="Write the private key even inside a git work tree.")
def keygen(prefix: str, force: bool) -> None:
    """Make an Ed25519 key pair for offline signing (sign --key).

    Never overwrites a file, and refuses to write a private key inside a git work tree (where one
    `git add .` would publish it) unless --force. Keep PREFIX.pem secret (a CI secret, a vault); put
    PREFIX.pub.pem in the trust policy's keys.
    """
    from sealflow.dsl.trust import signing

    private, public = Path(prefix + ".pem"), Path(prefix + ".pub.pem")
    tree = _work_tree(private.parent)  # also for a folder still to be made: the key would land in the tree
    if tree is not None and not force:
        refuse(f"{private} is inside the git work tree {tree}: a private key there is one `git add` away from "
               "being published",
               "write it outside the repository (e.g. --out ~/.sealflow/keys/ops) and keep it as a CI secret; "
               "--force writes it here anyway")
    for p in (private, public):
        if p.exists() or p.is_symlink():
            fail(f"{p} already exists; refusing to overwrite a key (choose another --out PREFIX)")
    if not private.parent.is_dir():
        fail_usage(f"{private.parent}: no such folder; make it first (mkdir -p {private.parent}) or choose another "
                   "--out PREFIX")
    key = signing.generate_key()
    try:
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, signing.private_pem(key))
        finally:
            os.close(fd)
        fd = os.open(public, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, signing.public_pem(key.public_key()))
        finally:
            os.close(fd)
    except FileExistsError as exc:
        fail(f"{exc.filename} already exists; refusing to overwrite a key")
    except OSError as exc:
        fail(f"cannot write the key: {exc.strerror or exc}")
    kid = signing.key_id(key.public_key())
    click.echo(f"wrote {private} (private key, mode 0600: keep it secret) and {public}")
    click.echo("keep the private key out of every repository: store it as a secret of the CI job that signs, or "
               "in a vault, and delete this copy once it is stored")
    click.echo(f"key id (sha256 of the public key): {kid}")
    click.echo(f"trust policy entry:\n  keys:\n    - id: {Path(prefix).name}\n      public_key: {public}")


# ---------------------------------------------------------------- sign

@dataclasses.dataclass
class _Item:
    path: Path
    data: bytes
    plan: Plan


def _validated(paths: tuple[str, ...], actions: tuple[str, ...]) -> list[_Item]:
    """Read each file once and check those bytes; refuse (exit 1) when any is invalid."""
    from sealflow.dsl.api import check_bytes

    metadata = load_action_metadata(actions)
    items, bad = [], []
    for path in expand_paths(paths):
        try:
            data = path.read_bytes()
        except OSError as exc:
            fail(f"{path}: cannot read: {exc.strerror or exc}")
        result = check_bytes(data, str(path), actions=metadata)
        if result.plan is None or result.errors:
            bad.append(result)
        else:
            items.append(_Item(path, data, result.plan))
    if bad:
        emit_diagnostics(bad, "text")
        fail(f"refusing to sign: {len(bad)} invalid definition{'s' if len(bad) != 1 else ''}; nothing was signed")
    return items


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="FILE...")
@click.option("--key", "key_path", type=click.Path(exists=True, dir_okay=False), metavar="PREFIX.pem",
              help="Sign offline with this Ed25519 private key; writes FILE.dsse.json.")
@click.option("--key-id", help="The keyid written in the envelope (default: sha256 of the public key).")
@click.option("--staging", is_flag=True, help="Keyless: use Sigstore's staging instance (for testing the job).")
@actions_option
def sign(paths: tuple[str, ...], key_path: str | None, key_id: str | None, staging: bool,
         actions: tuple[str, ...]) -> None:
    """Sign definitions, after validating them: keyless with Sigstore (CI), or offline with --key.

    Without --key, signs with the CI's ambient OIDC identity (Sigstore keyless) and writes
    FILE.sigstore.json; it needs the network and an OIDC token, and writes nothing when either is
    missing. Exit 0 signed, 1 refused (invalid definition, no credential, network), 2 usage.
    """
    if key_id and not key_path:
        fail_usage("--key-id goes with --key")
    items = _validated(paths, actions)
    if key_path:
        _sign_with_key(items, Path(key_path), key_id)
    else:
        _sign_keyless(items, staging)


def _sign_with_key(items: list[_Item], key_path: Path, key_id: str | None) -> None:
    from sealflow.dsl.trust import signing

    try:
        key = signing.load_private_key(key_path.read_bytes(), str(key_path))
    except signing.SigningError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{key_path}: cannot read: {exc.strerror or exc}")
    envelopes = [(item, signing.to_json(signing.sign(item.data, key, keyid=key_id))) for item in items]
    for item, body in envelopes:
        out = Path(str(item.path) + ".dsse.json")
        _write_atomic(out, body)
        click.echo(f"signed {item.path} -> {out} ({item.plan.name} v{item.plan.version}, {item.plan.digest}; "
                   f"keyid {key_id or signing.key_id(key.public_key())})")


def _sign_keyless(items: list[_Item], staging: bool) -> None:
    try:
        from sigstore.errors import Error
        from sigstore.oidc import IdentityToken, detect_credential
    except ImportError:
        fail("keyless signing needs the sigstore package: pip install 'sealflow[sigstore]' (or sign with --key)")
    raw = os.environ.get("SIGSTORE_IDENTITY_TOKEN")
    if not raw:
        try:
            raw = detect_credential()
        except Error as exc:
            fail(f"cannot get the CI's OIDC token: {_first_line(exc)}; nothing was signed")
    if not raw:
        fail("no ambient OIDC credential: keyless signing runs in CI with an OIDC token (GitHub Actions: "
             "permissions: id-token: write; or set SIGSTORE_IDENTITY_TOKEN); for local or air-gapped signing "
             "use sealflow keygen and sign --key. Nothing was signed")
    try:
        token = IdentityToken(raw)
    except Error as exc:
        fail(f"the OIDC token cannot be used: {_first_line(exc)}; nothing was signed")
    try:
        from sigstore.models import ClientTrustConfig
        from sigstore.sign import SigningContext

        config = ClientTrustConfig.staging() if staging else ClientTrustConfig.production()
        context = SigningContext.from_trust_config(config)
        with context.signer(token) as signer:
            bundles = [(item, signer.sign_artifact(item.data).to_json()) for item in items]
    except Error as exc:
        fail(f"keyless signing failed (Sigstore or the network): {_first_line(exc)}; nothing was written")
    except Exception as exc:  # network stacks raise their own kinds
        fail(f"keyless signing failed: {type(exc).__name__}: {_first_line(exc)}; nothing was written")
    for item, body in bundles:
        out = Path(str(item.path) + ".sigstore.json")
        _write_atomic(out, body.encode("utf-8"))
        click.echo(f"signed {item.path} -> {out} ({item.plan.name} v{item.plan.version}, {item.plan.digest}; "
                   f"identity {token.identity}, issuer {token.issuer})")


# ---------------------------------------------------------------- verify

@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="FILE...")
@click.option("--trust", "policy_path", required=True, type=click.Path(exists=True, dir_okay=False),
              metavar="POLICY", help="The trust policy (YAML): who may sign what.")
@click.option("--bundle", type=click.Path(exists=True, dir_okay=False), metavar="PATH",
              help="The signature file (DSSE envelope or Sigstore bundle); default FILE.sigstore.json or "
                   "FILE.dsse.json beside FILE.")
@click.option("--bom", is_flag=True, help="Show each verified definition's bill of materials: the files it read "
              "(sha256), the workflows it calls, the actions (module and version, with --actions) and models "
              "(provider and model id, from the configuration) it uses.")
@actions_option
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def verify(paths: tuple[str, ...], policy_path: str, bundle: str | None, bom: bool, actions: tuple[str, ...],
           as_json: bool) -> None:
    """Verify signed definitions against a trust policy, offline.

    Exit 0 when every file verifies (prints who signed), 1 when any is refused (prints why), 2 usage.
    """
    from sealflow.dsl.refs import recording
    from sealflow.dsl.trust import PolicyError, Refused, load_policy, verify_file

    files = expand_paths(paths)
    if bundle and len(files) != 1:
        fail_usage("--bundle goes with exactly one FILE")
    try:
        policy = load_policy(policy_path)
    except PolicyError as exc:
        for d in exc.diagnostics:
            click.echo(d.format())
        fail(f"refused: the trust policy {policy_path} is invalid ({len(exc.diagnostics)} "
             f"error{'s' if len(exc.diagnostics) != 1 else ''}); nothing verified")
    results: list[Verified | tuple[str, Refused]] = []
    bills: dict[int, dict[str, Any]] = {}
    materials = _Materials(actions) if bom else None
    metadata = load_action_metadata(actions) if actions else None  # (their effects and permissions, checked too)
    for f in files:
        try:
            with recording() as read:
                results.append(verify_file(f, policy, bundle=bundle, actions=metadata))
        except Refused as exc:
            results.append((str(f), exc))
            continue
        if materials is not None:
            bills[len(results) - 1] = materials.bill(results[-1], dict(read))
    ok = all(not isinstance(r, tuple) for r in results)
    if as_json:
        rows = [{**r.as_dict(), **({"bom": bills[i]} if i in bills else {})} if not isinstance(r, tuple) else
                {"verified": False, "path": r[0], "reason": r[1].reason, "message": r[1].message, "hint": r[1].hint}
                for i, r in enumerate(results)]
        click.echo(json.dumps({"ok": ok, "results": rows}, indent=2))
    else:
        for r in results:
            if isinstance(r, tuple):
                path, refused = r
                click.echo(f"refused: {path}: [{refused.reason}] {refused.message}")
                if refused.hint:
                    click.echo(f"  hint: {refused.hint}")
            else:
                click.echo(f"verified: {r.path}: {r.name} v{r.version} ({r.digest}), namespace {r.namespace}, "
                           f"signed by {r.who()}")
        for i in sorted(bills):
            _print_bill(bills[i], "  ")
    sys.exit(0 if ok else 1)


class _Materials:
    """What ``verify --bom`` adds to a bill from this environment: each action's module and the version of the
    distribution that ships it (the ``--actions`` and project modules), each model's provider and model id."""

    def __init__(self, actions: tuple[str, ...]):
        from sealflow.cli.session import import_actions, load_config
        from sealflow.execution.actions import REGISTRY
        from sealflow.providers.loader import list_models

        import_actions(actions, demo=True)
        self.registry = REGISTRY
        config = load_config()
        self.models = {row["name"]: row for row in list_models(config.extra, source=config.source)}

    def bill(self, verified: Any, files: dict[str, str]) -> dict[str, Any]:
        from sealflow.dsl.bom import bill_of_materials

        return self._enrich(bill_of_materials(verified, files))

    def _enrich(self, bill: dict[str, Any]) -> dict[str, Any]:
        for row in bill["actions"]:
            act = self.registry.get(row["name"])
            module = None if act is None else getattr(act.fn, "__module__", None)
            row.update(module=module, distribution=_distribution(module))
        bill["models"] = [{"name": name, "provider": (self.models.get(name) or {}).get("provider"),
                           "model": (self.models.get(name) or {}).get("model")} for name in bill["models"]]
        for child in bill["calls"]:
            self._enrich(child)
        return bill


def _distribution(module: str | None) -> str | None:
    """``name version`` of the installed distribution that ships ``module`` (None: none does, e.g. a file)."""
    if not module:
        return None
    from importlib import metadata

    dists = metadata.packages_distributions().get(module.split(".")[0]) or []
    if not dists:
        return None
    try:
        return f"{dists[0]} {metadata.version(dists[0])}"
    except metadata.PackageNotFoundError:
        return None


def _print_bill(bill: dict[str, Any], indent: str) -> None:
    d = bill["definition"]
    click.echo(f"{indent}bill of materials of {d['name']} v{d['version']} ({d['digest']}), signed by {d['signer']}:")
    for f in bill.get("files", ()):
        click.echo(f"{indent}  file    {f['path']}  sha256:{f['sha256']}  {f['bytes']} bytes")
    for a in bill["actions"]:
        what = ", ".join(x for x in (a.get("effect"), " ".join(a.get("permissions") or ())) if x)
        where = a.get("module") or "not registered here (--actions MODULE)"
        click.echo(f"{indent}  action  {a['name']}" + (f" ({what})" if what else "") + f"  from {where}"
                   + (f" [{a['distribution']}]" if a.get("distribution") else ""))
    for t in bill["agent_tools"]:
        click.echo(f"{indent}  tool    {t}")
    for m in bill.get("mcp_tools", ()):
        click.echo(f"{indent}  mcp     {m['tool']} ({m['effect']})  description {m['description_digest'][:19]}...  "
                   f"input schema {m['input_schema_digest'][:19]}...")
    for m in bill["models"]:
        click.echo(f"{indent}  model   {m['name']}  " + (f"{m['provider']}:{m['model']}" if m.get("provider")
                                                         else "not configured here"))
    for child in bill["calls"]:
        c = child["definition"]
        click.echo(f"{indent}  calls   {c['name']} v{c['version']} ({c['digest']})")
        _print_bill({**child, "files": []}, indent + "    ")


# ---------------------------------------------------------------- diff

@click.command()
@click.argument("paths", nargs=-1, metavar="OLD NEW | [PATH...]")
@click.option("--base", metavar="GITREF", help="Compare the working tree under PATH (default definitions/) with "
              "this git ref, as a pull-request job does.")
@actions_option
@click.option("--format", "fmt", type=click.Choice(["text", "json", "github", "markdown"]), default="text",
              show_default=True, help="Output format (markdown: for a CI job summary).")
@click.option("--severity", "overrides", multiple=True, metavar="CODE=review|info",
              help="Change the severity of a finding code (e.g. D615=review). Repeatable.")
def diff(paths: tuple[str, ...], base: str | None, actions: tuple[str, ...], fmt: str,
         overrides: tuple[str, ...]) -> None:
    """The security diff: per workflow, the changes that matter for safety.

    `sealflow diff OLD NEW` compares two files (or folders); `sealflow diff --base REF [PATH...]`
    compares the working tree with a git ref. Changes are computed on the compiled plans, so
    formatting does not matter. Exit 2 when a change needs a security reviewer, 0 when none,
    1 when either side is invalid.
    """
    from sealflow.dsl.api import check_bytes, check_file
    from sealflow.dsl.codes import CODES
    from sealflow.dsl.diff import Side, diff_sides

    levels = {}
    for item in overrides:
        code, _, level = item.partition("=")
        if code.upper() not in CODES or not code.upper().startswith("D6") or level not in ("review", "info"):
            fail_usage(f"--severity {item}: expected D6xx=review or D6xx=info")
        levels[code.upper()] = level
    metadata = load_action_metadata(actions)
    if base:
        targets = list(paths) or ["definitions"]
        try:
            top, old_files = files_at_ref(base, targets)
        except GitError as exc:
            fail_usage(str(exc))
        old_results = [check_bytes(data, f"{base}:{name}", actions=metadata, root=top,
                                   facts=_old_lock(top, base, name)) for name, data in old_files]
        new_results = [check_file(p, actions=metadata) for p in working_files(targets)]
        if not old_results and not new_results:
            fail_usage(f"no .yaml files under {', '.join(targets)} in the working tree or at {base}")
    else:
        if len(paths) != 2:
            fail_usage("give OLD and NEW (two files or folders), or --base GITREF [PATH...]")
        old_results = [check_file(p, actions=metadata) for p in expand_paths(paths[:1])]
        new_results = [check_file(p, actions=metadata) for p in expand_paths(paths[1:])]
    invalid = [r for r in old_results + new_results if r.plan is None or r.errors]
    if invalid:
        emit_diagnostics(invalid, fmt if fmt in ("text", "json", "github") else "text")
        fail(f"cannot diff: {len(invalid)} invalid definition{'s' if len(invalid) != 1 else ''} "
             "(fix them, or validate each side)")

    def sides(results: list[CheckResult]) -> list[Side]:
        # (every result has its plan: the invalid ones were refused above)
        return [Side(r.plan, r.path, r.document.locate if r.document else None) for r in results if r.plan is not None]

    findings = diff_sides(sides(old_results), sides(new_results))
    findings = [dataclasses.replace(f, severity=levels[f.code]) if f.code in levels else f for f in findings]
    _emit_findings(findings, fmt, base)
    sys.exit(2 if any(f.severity == "review" for f in findings) else 0)


def _old_lock(top: Path, base: str, name: str) -> ProjectFacts:
    """The MCP lock a definition at ``base`` was compiled against (the lock as it was at ``base``), as facts."""
    from sealflow.cli.git_files import lock_at_ref
    from sealflow.dsl import mcp_lock
    from sealflow.dsl.typecheck import ProjectFacts

    data = lock_at_ref(top, base, name)
    if data is None:  # none at the ref: an MCP tool the old side names is not pinned (not the working tree's)
        return ProjectFacts(mcp_lock={})
    try:
        return ProjectFacts(mcp_lock=mcp_lock.parse(data.decode("utf-8", "replace"), f"{base}:sealflow.mcp.lock"))
    except mcp_lock.LockError as exc:
        fail_usage(str(exc))


def _emit_findings(findings: list[Finding], fmt: str, base: str | None) -> None:
    review = sum(1 for f in findings if f.severity == "review")
    info = len(findings) - review
    summary = (f"{len(findings)} change{'s' if len(findings) != 1 else ''} that matter for safety: {review} "
               f"need{'s' if review == 1 else ''} a security reviewer, {info} info") if findings else \
        "no safety-relevant changes"
    if fmt == "json":
        click.echo(json.dumps({"needs_review": review > 0, "review": review, "info": info,
                               "findings": [f.as_dict() for f in findings]}, indent=2))
        return
    if fmt == "github":
        for f in findings:
            level = "warning" if f.severity == "review" else "notice"
            loc = f.location
            props = [f"file={github_escape(loc.path if loc else f.path, prop=True)}"] if (loc or f.path) else []
            if loc:
                props += [f"line={loc.line}", f"col={loc.column}"]
            title = f"{f.code} {'security review' if f.severity == 'review' else 'info'}"
            props.append(f"title={github_escape(title, prop=True)}")
            click.echo(f"::{level} {','.join(props)}::{github_escape(f.where + ': ' + f.message)}")
        click.echo(summary, err=True)
        return
    if fmt == "markdown":
        click.echo("## Sealflow security diff" + (f" against `{base}`" if base else ""))
        click.echo("")
        if not findings:
            click.echo("No safety-relevant changes.")
            return
        click.echo(f"**{review}** change{'s' if review != 1 else ''} need{'s' if review == 1 else ''} a security "
                   f"reviewer, {info} for information.")
        click.echo("")
        click.echo("| severity | code | workflow | step | change | where |")
        click.echo("|---|---|---|---|---|---|")
        for f in findings:
            where = f"`{f.location}`" if f.location else f"`{f.path}`" if f.path else ""
            message = f.message.replace("|", "\\|")
            click.echo(f"| {'**review**' if f.severity == 'review' else 'info'} | {f.code} | {f.workflow} | "
                       f"{f.step or ''} | {message} | {where} |")
        return
    for f in findings:
        click.echo(f.format())
    click.echo(summary, err=True)


def register(group: click.Group) -> None:
    for command in (keygen, sign, verify, diff):
        group.add_command(command)


__all__ = ["register"]
