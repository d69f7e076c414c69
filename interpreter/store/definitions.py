"""The definition registry: which (name, version, digest) a store has loaded, signed by whom.

Loading a definition for a run records it here, atomically with its checks:

- a second digest for a (name, version) already recorded is refused (``second-digest``): a signed
  version is immutable, and no silent replacement is possible;
- a version lower than the highest one recorded is refused (``rollback``) unless the operator pins
  it; the pin is recorded and audited, and makes that version the active one;
- loading the highest version again clears a pin (audited).

The *active* version of a name is the pinned one if there is a pin, else the highest recorded.
Runs record the digest and signer they execute, so a run in flight keeps its version when a newer
one is activated, and a dead-letter redrive runs the original.

The exact definition bytes and their signature envelope (a DSSE envelope or a Sigstore bundle) are
stored beside the registry (``definition_sources``, keyed by plan digest and a hash of bytes and
envelope), written in the same transaction as the run they are first submitted with
(:meth:`~sealflow.store.sql.store.SqlStore.submit` with ``definition=``). A
submitter's view of who signed is a *claim*: an executing process verifies the stored bytes and
envelope against its own trust policy (:mod:`sealflow.policy.trustgate`). A version an
executor refused (``refused``) neither counts as the highest recorded version nor becomes active,
and its (name, version) may be recorded again with another digest; an executor that later verifies
it clears the mark.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from sealflow.store.errors import StoreError

if TYPE_CHECKING:
    from sealflow.store.auditchain import Writes
    from sealflow.store.changes import AuditEvent


class DefinitionRefused(StoreError):
    """Loading a definition would replace a signed version or roll back without a pin."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclasses.dataclass(slots=True)
class DefinitionRecord:
    name: str
    version: int
    digest: str
    signer: str
    first_seen: float
    last_seen: float
    loads: int
    active: bool = False
    pinned: bool = False
    #: why an executor refused this version (its signature does not verify against the executor's trust
    #: policy); None: not refused
    refused: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class DefinitionSource:
    """The exact bytes of a definition and the signature over them, as submitted."""

    source: bytes
    #: the DSSE envelope or Sigstore bundle bytes; None for an unsigned definition
    envelope: bytes | None = None
    #: "dsse" or "sigstore" (None: unsigned)
    kind: str | None = None
    #: the files the compile read beside it ($ref schemas, prompts; path relative to the repository root ->
    #: text): not signed (the signature covers the definition file), but the compiled digest covers them
    refs: dict[str, str] | None = None
    #: the workflows it calls, as verified with it (each signed under the same policy): recorded in the registry
    #: in the same transaction (a second digest for a recorded (name, version) of one of them is refused too)
    called: tuple[Registration, ...] = dataclasses.field(default=(), compare=False)

    @property
    def key(self) -> str:
        """Identifies these bytes, this envelope and these files among the sources of one digest."""
        h = hashlib.sha256(self.source)
        h.update(b"\0" + (self.envelope or b"") + b"\0" + self.refs_json().encode())
        return h.hexdigest()

    def refs_json(self) -> str:
        return json.dumps(self.refs or {}, sort_keys=True, separators=(",", ":"))


@dataclasses.dataclass(frozen=True, slots=True)
class Registration:
    """What a submission records in the registry, in the same transaction as its run (``Store.submit``)."""

    name: str
    version: int
    digest: str
    #: the submitter's claim of who signed: ``key:<sha256 fingerprint>`` or ``sigstore:<identity>@<issuer>``
    signer: str
    source: DefinitionSource | None = None
    pin: bool = False
    actor: str = "system"


def called_registrations(verified: Any, refs: dict[str, str] | None) -> tuple[Registration, ...]:
    """What the registry records of the workflows a verified definition (``sealflow.dsl.trust.Verified``) calls:
    each as it was verified with it (its bytes, signature and signer; the files its caller's compile read, which
    hold its own), with the workflows it calls in turn."""
    return tuple(Registration(v.name, v.version, v.digest, v.principal(),
                              DefinitionSource(v.source, v.envelope, v.envelope_kind, refs,
                                               called_registrations(v, refs)))
                 for v in verified.called)


SCHEMA = """
CREATE TABLE IF NOT EXISTS definitions (
    name TEXT NOT NULL, version INTEGER NOT NULL, digest TEXT NOT NULL, signer TEXT NOT NULL,
    first_seen REAL NOT NULL, last_seen REAL NOT NULL, loads INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (name, version));
CREATE TABLE IF NOT EXISTS definition_pins (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, actor TEXT NOT NULL, at REAL NOT NULL);
ALTER TABLE runs ADD COLUMN signer TEXT;
"""

#: migration 6 (SQLite): the submitted bytes and envelopes; an executor's refusal of a version
SCHEMA_SOURCES = """
CREATE TABLE IF NOT EXISTS definition_sources (
    digest TEXT NOT NULL, source_key TEXT NOT NULL, name TEXT NOT NULL, version INTEGER NOT NULL,
    source BLOB NOT NULL, envelope BLOB, envelope_kind TEXT, refs TEXT, first_seen REAL NOT NULL,
    PRIMARY KEY (digest, source_key));
ALTER TABLE definitions ADD COLUMN refused TEXT;
"""



@runtime_checkable
class DefinitionRegistry(Protocol):
    """The definition registry (one aggregate of the store: see this module)."""

    def register_definition(self, name: str, version: int, digest: str, signer: str, *,
                            pin: bool = False, actor: str = "system") -> DefinitionRecord:
        """Record (now, on the store's clock) a loaded (name, version, digest) and its signer, atomically refusing
        a second digest for a recorded (name, version) and a lower version than the highest without ``pin``;
        returns the record."""

    def definitions(self, name: str | None = None) -> list[DefinitionRecord]:
        """Every recorded definition version (with ``active`` and ``pinned``), by name then version."""

    def definition_sources(self, digest: str) -> list[DefinitionSource]:
        """The submitted bytes and signature envelopes of plan ``digest``, oldest first."""

    def mark_definition(self, name: str, version: int, digest: str, *, refused: str | None,
                        actor: str, signer: str | None = None) -> bool:
        """An executor's verdict on a recorded version, now: refused (why), or verified (``refused`` None)."""

    def record_signer(self, run_id: str, signer: str) -> None:
        """Record who signed the definition a run executes (``unsigned`` in development mode)."""

    def run_signer(self, run_id: str) -> str | None:
        """Who signed the definition run ``run_id`` executes (None: not recorded)."""


class DefinitionsMixin:
    """SQLite implementation; expects ``_tx``, ``_read`` and ``_audit`` from the store."""

    if TYPE_CHECKING:  # the store's, which this is mixed into (sealflow.store.sql.store.SqlStore)
        def _tx(self) -> AbstractContextManager[Any]: ...

        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]: ...

        def _audit(self, c: Any, now: float, run_id: str | None, step_id: str | None, event: str,
                   actor: str = "system", before: str | None = None, after: str | None = None,
                   detail: dict[str, Any] | None = None, chain: dict[str, Any] | None = None) -> None: ...

        def _now(self) -> float: ...

        def append_audit(self, event: AuditEvent, now: float) -> None: ...

    def register_definition(self, name: str, version: int, digest: str, signer: str, *,
                            pin: bool = False, actor: str = "system") -> DefinitionRecord:
        reg = Registration(name, version, digest, signer, None, pin, actor)
        now = self._now()
        try:
            with self._tx() as c:
                self._register(c, reg, now)
        except DefinitionRefused as exc:
            self.audit_definition_refused(reg, exc, now)
            raise
        return next(d for d in self.definitions(name) if d.version == version)

    def audit_definition_refused(self, reg: Registration, exc: DefinitionRefused, now: float,
                                 tenant: str | None = None) -> None:
        """Audit a refused registration (after its transaction was rolled back: nothing else is written)."""
        from sealflow.store.records import AuditEvent

        self.append_audit(AuditEvent("definition.refused", None, reg.actor, tenant=tenant, detail={
            "name": reg.name, "version": reg.version, "digest": reg.digest, "signer": reg.signer,
            "reason": exc.reason}), now)

    def _register(self, c: Writes, reg: Registration, now: float) -> None:
        """Record ``reg`` on connection ``c`` (inside the caller's transaction); :class:`DefinitionRefused`
        leaves the transaction to be rolled back by the caller."""
        name, version, digest, signer, actor = reg.name, reg.version, reg.digest, reg.signer, reg.actor
        row = c.execute("SELECT digest, refused FROM definitions WHERE name = ? AND version = ?",
                        (name, version)).fetchone()
        if row is not None and row[0] != digest and row[1] is None:
            raise DefinitionRefused("second-digest", (
                f"{name} v{version} is already recorded with digest {row[0]}, and this file has {digest}: "
                "a signed version never changes; bump the version and sign it again"))
        highest = c.execute("SELECT MAX(version) FROM definitions WHERE name = ? AND refused IS NULL",
                            (name,)).fetchone()[0]
        pinned = c.execute("SELECT version FROM definition_pins WHERE name = ?", (name,)).fetchone()
        if highest is not None and version < highest and not reg.pin and not (pinned and pinned[0] == version):
            raise DefinitionRefused("rollback", (
                f"{name} v{version} is older than v{highest}, already run on this store: a rollback needs "
                "an operator's pin (--pin-version), which is audited"))
        if row is None:
            c.execute("INSERT INTO definitions (name, version, digest, signer, first_seen, last_seen) "
                      "VALUES (?,?,?,?,?,?)", (name, version, digest, signer, now, now))
            self._audit(c, now, None, None, "definition.recorded", actor, None, None,
                        {"name": name, "version": version, "digest": digest, "signer": signer})
        elif row[0] != digest:  # the recorded digest was refused by an executor: this one replaces it
            c.execute("UPDATE definitions SET digest = ?, signer = ?, refused = NULL, first_seen = ?, last_seen = ?, "
                      "loads = 1 WHERE name = ? AND version = ?", (digest, signer, now, now, name, version))
            self._audit(c, now, None, None, "definition.recorded", actor, None, None,
                        {"name": name, "version": version, "digest": digest, "signer": signer,
                         "replaces_refused": row[0]})
        else:  # a refused mark stays until an executor verifies this digest (a submitter cannot clear it)
            c.execute("UPDATE definitions SET last_seen = ?, loads = loads + 1 WHERE name = ? AND version = ?",
                      (now, name, version))
        for child in reg.source.called if reg.source is not None else ():  # the workflows it calls, alike
            self._register(c, dataclasses.replace(child, actor=actor), now)
        if reg.source is not None:
            src = reg.source
            c.execute("INSERT INTO definition_sources (digest, source_key, name, version, source, envelope, "
                      "envelope_kind, refs, first_seen) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
                      (digest, src.key, name, version, src.source, src.envelope, src.kind,
                       src.refs_json() if src.refs else None, now))
        if reg.pin:
            c.execute("INSERT INTO definition_pins (name, version, actor, at) VALUES (?,?,?,?) "
                      "ON CONFLICT(name) DO UPDATE SET version = excluded.version, actor = excluded.actor, "
                      "at = excluded.at", (name, version, actor, now))
            self._audit(c, now, None, None, "definition.pinned", actor, None, None,
                        {"name": name, "version": version, "digest": digest, "highest": highest})
        elif pinned and highest is not None and version >= highest and pinned[0] != version:
            c.execute("DELETE FROM definition_pins WHERE name = ?", (name,))
            self._audit(c, now, None, None, "definition.unpinned", actor, None, None,
                        {"name": name, "version": version, "was_pinned": pinned[0]})

    def definition_sources(self, digest: str) -> list[DefinitionSource]:
        """The stored bytes and envelopes that were submitted for plan ``digest`` (oldest first)."""
        got = self._read("SELECT source, envelope, envelope_kind, refs FROM definition_sources WHERE digest = ? "
                         "ORDER BY first_seen, source_key", (digest,))
        return [DefinitionSource(bytes(s), None if e is None else bytes(e), k, json.loads(r) if r else None)
                for s, e, k, r in got]

    def mark_definition(self, name: str, version: int, digest: str, *, refused: str | None,
                        actor: str, signer: str | None = None) -> bool:
        """An executor's verdict on a recorded version: ``refused`` (why) or verified (None, with the
        ``signer`` it verified). Returns whether the mark changed; a change is audited."""
        now = self._now()
        with self._tx() as c:
            row = c.execute("SELECT refused FROM definitions WHERE name = ? AND version = ? AND digest = ?",
                            (name, version, digest)).fetchone()
            if row is None or (row[0] is None) == (refused is None):
                return False
            c.execute("UPDATE definitions SET refused = ? WHERE name = ? AND version = ? AND digest = ?",
                      (refused, name, version, digest))
            event = "definition.untrusted" if refused is not None else "definition.verified"
            self._audit(c, now, None, None, event, actor, None, None,
                        {"name": name, "version": version, "digest": digest,
                         **({"reason": refused} if refused else {}), **({"signer": signer} if signer else {})})
        return True

    def definitions(self, name: str | None = None) -> list[DefinitionRecord]:
        where, args = ("WHERE d.name = ?", (name,)) if name else ("", ())
        got = self._read("SELECT d.name, d.version, d.digest, d.signer, d.first_seen, d.last_seen, d.loads, "
                         "p.version, d.refused FROM definitions d LEFT JOIN definition_pins p ON p.name = d.name "
                         f"{where} ORDER BY d.name, d.version", args)
        highest: dict[str, int] = {}
        for r in got:
            if r[8] is None:
                highest[r[0]] = max(highest.get(r[0], 0), r[1])
        out = []
        for n, v, digest, signer, first, last, loads, pin, refused in got:
            active = refused is None and v == (pin if pin is not None else highest.get(n))
            out.append(DefinitionRecord(n, v, digest, signer, first, last, loads, active, pin == v, refused))
        return out

    def record_signer(self, run_id: str, signer: str) -> None:
        with self._tx() as c:
            c.execute("UPDATE runs SET signer = ? WHERE id = ?", (signer, run_id))

    def run_signer(self, run_id: str) -> str | None:
        got = self._read("SELECT signer FROM runs WHERE id = ?", (run_id,))
        return got[0][0] if got else None
