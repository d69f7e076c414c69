"""Definition files on the command line: find them, compile them, and load one for a run (verify it when a
trust policy is given, compile the same bytes; the run records it in the store's registry).

With ``--trust POLICY`` the file's bytes are read once, their signature verified against the policy
(offline), and those same bytes compiled (:func:`sealflow.dsl.trust.verify_file`); the ``name`` and ``version``
inside must match the file name (``<name>.v<version>.yaml``). The submission then records, in the
same transaction as its run, the definition in the store's registry (refusing a second digest for a
recorded (name, version) and a rollback without ``--pin-version``) with its exact bytes and signature
envelope, which every executing process verifies again against its *own* policy. The recorded signer
is ``key:<sha256 fingerprint>`` or ``sigstore:<identity>@<issuer>``: a key id is only a label of the
policy that defines it.

Without a policy, a local file runs in development mode: a warning is printed and the run records
``unsigned`` as its signer. Processes meant to serve a shared deployment (``worker``, ``serve``) refuse
unsigned definitions unless started with ``--allow-unsigned``.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sealflow.cli.diagnostics import emit_diagnostics
from sealflow.cli.exits import fail_usage, refuse
from sealflow.cli.session import load_action_metadata, load_trust_policy

if TYPE_CHECKING:  # the CLI imports the language lazily, per command
    from sealflow.dsl.plan import Plan
    from sealflow.interpreter.store.definitions import DefinitionSource

UNSIGNED = "unsigned"
_FILE_NAME = re.compile(r"^(?P<name>.+)\.v(?P<version>[0-9]+)\.ya?ml$")


@dataclasses.dataclass(frozen=True)
class Loaded:
    plan: Plan
    #: ``key:<fingerprint>``, ``sigstore:<identity>@<issuer>`` or ``unsigned``
    signer: str
    #: who signed, for people (the policy's key id beside the fingerprint)
    who: str
    #: the exact bytes and signature envelope (None when unsigned)
    source: DefinitionSource | None = None


def expand_paths(paths: tuple[str, ...]) -> list[Path]:
    """Files as given; folders expanded to the *.yaml / *.yml files under them, sorted."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.suffix in (".yaml", ".yml") and q.is_file())
            if not found:
                fail_usage(f"{raw}: no .yaml files in this folder")
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            fail_usage(f"{raw}: no such file or folder")
    return out


def compile_or_exit(path: str, actions, fmt: str = "text"):
    """The plan compiled from ``path``; an invalid definition prints its diagnostics and exits 1."""
    from sealflow.dsl.api import check_file

    if not Path(path).is_file():
        fail_usage(f"{path}: no such file")
    result = check_file(path, actions=load_action_metadata(actions))
    if result.plan is None or result.errors:
        emit_diagnostics([result], fmt)
        sys.exit(1)
    return result.plan


def load(path: str, action_specs: tuple[str, ...], *, trust: str | None, bundle: str | None = None,
         allow_unsigned: bool = True) -> Loaded:
    """The plan to run from ``path``, and who signed it (``unsigned`` in development mode)."""
    if not Path(path).is_file():  # before any word about its signature: there is nothing to verify
        fail_usage(f"{path}: no such file")
    if trust is None:
        if not allow_unsigned:
            refuse(f"{path} is not verified: this process runs only signed definitions",
                   "pass --trust POLICY (docs/trust.md), or --allow-unsigned for development")
        click.echo(f"sealflow: warning: development mode: {path} is not verified (no --trust); the run records "
                   "'unsigned'", err=True)
        return Loaded(compile_or_exit(path, action_specs), UNSIGNED, UNSIGNED)
    from sealflow.dsl.refs import recording
    from sealflow.dsl.trust import Refused, verify_file


    policy = load_trust_policy(trust)
    try:
        with recording() as refs:  # the files the compile reads beside it: stored with the signed bytes
            verified = verify_file(path, policy, bundle=bundle, actions=load_action_metadata(action_specs))
    except Refused as exc:
        refuse(f"{path}: [{exc.reason}] {exc}", getattr(exc, "hint", None))
    m = _FILE_NAME.match(Path(path).name)
    if m is None or (m.group("name"), int(m.group("version"))) != (verified.name, verified.version):
        expected = f"{verified.name}.v{verified.version}.yaml"
        refuse(f"{path} holds {verified.name} v{verified.version}, which is not what its file name says",
               f"a signed definition is loaded by its name: call the file {expected}")
    from sealflow.interpreter.store.definitions import DefinitionSource

    source = DefinitionSource(verified.source, verified.envelope, verified.envelope_kind, dict(refs) or None)
    return Loaded(verified.plan, verified.principal(), verified.who(), source)


def submit(rt, loaded: Loaded, value, *, initiator: str, tenant: str, idempotency_key: str | None = None,
           pin: bool = False, run_as: str | None = None) -> str:
    """Submit a run of a loaded definition, recording a signed one (its bytes, envelope and any pin) in the
    store's registry in the same transaction; a refused registration (second digest, rollback) exits 1
    and, like every other refusal, leaves nothing written."""
    from sealflow.interpreter.store.definitions import DefinitionRefused

    if loaded.signer == UNSIGNED and pin:
        fail_usage("--pin-version needs --trust: only signed versions are recorded and pinned")
    try:
        return rt.submit(loaded.plan, value, initiator=initiator, tenant=tenant, idempotency_key=idempotency_key,
                         run_as=run_as, signer=loaded.signer, source=loaded.source, pin=pin)
    except DefinitionRefused as exc:
        refuse(f"[{exc.reason}] {exc}")
