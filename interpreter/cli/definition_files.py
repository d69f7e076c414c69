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
from typing import TYPE_CHECKING, Any, NoReturn

import click

from sealflow.cli.diagnostics import emit_diagnostics
from sealflow.cli.exits import fail_usage, refuse
from sealflow.cli.git_files import is_definition_name
from sealflow.cli.session import load_action_metadata, load_trust_policy, project_facts

if TYPE_CHECKING:  # the CLI imports the language lazily, per command
    from sealflow.dsl.plan import Plan
    from sealflow.dsl.trust import Refused
    from sealflow.runtime.facade import Runtime
    from sealflow.store.definitions import DefinitionSource

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
    """Files as given; folders expanded to the *.yaml / *.yml files under them, sorted, leaving out workflow
    test files (``*.test.yaml``: ``sealflow test`` reads them, docs/testing.md)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if is_definition_name(q.name) and q.is_file())
            if not found:
                fail_usage(f"{raw}: no .yaml files in this folder")
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            fail_usage(f"{raw}: no such file or folder")
    return out


def compile_or_exit(path: str, actions: tuple[str, ...], fmt: str = "text") -> Plan:
    """The plan compiled from ``path``; an invalid definition prints its diagnostics and exits 1."""
    from sealflow.dsl.api import check_file

    if not Path(path).is_file():
        fail_usage(f"{path}: no such file")
    result = check_file(path, actions=load_action_metadata(actions), facts=project_facts())
    if result.plan is None or result.errors:
        emit_diagnostics([result], fmt)
        sys.exit(1)
    return result.plan


class NotLoaded(Exception):
    """A definition file that cannot be loaded: its definition errors (``results``), or a refusal (``hint``),
    or a usage error (``usage``: no such file). :func:`load` prints it and exits; a caller that goes on without
    the file (``sealflow scheduler``) reads it instead."""

    def __init__(self, message: str, *, reason: str, hint: str | None = None, results: list[Any] | None = None,
                 usage: bool = False):
        super().__init__(message)
        self.message, self.reason, self.hint, self.results, self.usage = message, reason, hint, results, usage

    def exit(self, fmt: str = "text") -> NoReturn:
        if self.results:
            emit_diagnostics(self.results, fmt)
            sys.exit(1)
        if self.usage:
            fail_usage(self.message)
        refuse(self.message, self.hint)


def load(path: str, action_specs: tuple[str, ...], *, trust: str | None, bundle: str | None = None,
         allow_unsigned: bool = True) -> Loaded:
    """The plan to run from ``path``, and who signed it (``unsigned`` in development mode); a file that cannot be
    loaded prints why and exits (:class:`NotLoaded`)."""
    try:
        return try_load(path, action_specs, trust=trust, bundle=bundle, allow_unsigned=allow_unsigned)
    except NotLoaded as exc:
        exc.exit()


def try_load(path: str, action_specs: tuple[str, ...], *, trust: str | None, bundle: str | None = None,
             allow_unsigned: bool = True) -> Loaded:
    """:func:`load`, raising :class:`NotLoaded` (``reason``: ``invalid_definition``, ``invalid_schedule`` for a
    definition whose only fault is S209, ``untrusted``, ``no_file``) where it would print and exit."""
    if not Path(path).is_file():  # before any word about its signature: there is nothing to verify
        raise NotLoaded(f"{path}: no such file", reason="no_file", usage=True)
    if trust is None:
        if not allow_unsigned:
            raise NotLoaded(f"{path} is not verified: this process runs only signed definitions", reason="untrusted",
                            hint="pass --trust POLICY (docs/trust.md), or --allow-unsigned for development")
        click.echo(f"sealflow: warning: development mode: {path} is not verified (no --trust); the run records "
                   "'unsigned'", err=True)
        from sealflow.dsl.api import check_file

        result = check_file(path, actions=load_action_metadata(action_specs))
        if result.plan is None or result.errors:
            codes = {d.code for d in result.errors}
            first = result.errors[0] if result.errors else None
            raise NotLoaded(first.format().splitlines()[0] if first else f"{path}: does not compile",
                            reason="invalid_schedule" if codes == {"S209"} else "invalid_definition",
                            hint=first.hint if first else None, results=[result])
        return Loaded(result.plan, UNSIGNED, UNSIGNED)
    from sealflow.dsl.refs import recording
    from sealflow.dsl.trust import Refused, verify_file


    policy = load_trust_policy(trust)
    try:
        with recording() as refs:  # the files the compile reads beside it: stored with the signed bytes
            verified = verify_file(path, policy, bundle=bundle, actions=load_action_metadata(action_specs))
    except Refused as exc:
        raise NotLoaded(f"{path}: [{exc.reason}] {exc}", reason=_refusal_reason(exc),
                        hint=getattr(exc, "hint", None)) from None
    m = _FILE_NAME.match(Path(path).name)
    if m is None or (m.group("name"), int(m.group("version"))) != (verified.name, verified.version):
        expected = f"{verified.name}.v{verified.version}.yaml"
        raise NotLoaded(f"{path} holds {verified.name} v{verified.version}, which is not what its file name says",
                        reason="untrusted",
                        hint=f"a signed definition is loaded by its name: call the file {expected}")
    from sealflow.store.definitions import DefinitionSource, called_registrations

    source = DefinitionSource(verified.source, verified.envelope, verified.envelope_kind, dict(refs) or None,
                              called_registrations(verified, dict(refs) or None))
    return Loaded(verified.plan, verified.principal(), verified.who(), source)


def _refusal_reason(exc: Refused) -> str:
    """A verification's refusal as a :class:`NotLoaded` reason: signed bytes that do not validate (their schedule,
    S209, or else), else untrusted."""
    if exc.reason != "invalid-definition":
        return "untrusted"
    return "invalid_schedule" if "error[S209]" in exc.message else "invalid_definition"


def submit(rt: Runtime, loaded: Loaded, value: Any, *, initiator: str, tenant: str, idempotency_key: str | None = None,
           pin: bool = False, run_as: str | None = None, tags: dict[str, str] | None = None) -> str:
    """Submit a run of a loaded definition, recording a signed one (its bytes, envelope and any pin) in the
    store's registry in the same transaction; a refused registration (second digest, rollback) exits 1
    and, like every other refusal, leaves nothing written."""
    from sealflow.store.definitions import DefinitionRefused

    if loaded.signer == UNSIGNED and pin:
        fail_usage("--pin-version needs --trust: only signed versions are recorded and pinned")
    try:
        return rt.submit(loaded.plan, value, initiator=initiator, tenant=tenant, idempotency_key=idempotency_key,
                         run_as=run_as, signer=loaded.signer, source=loaded.source, pin=pin, tags=tags)
    except DefinitionRefused as exc:
        refuse(f"[{exc.reason}] {exc}")
