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
"""

from __future__ import annotations

import dataclasses

from sealflow.interpreter.store.errors import StoreError


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


SCHEMA = """
CREATE TABLE IF NOT EXISTS definitions (
    name TEXT NOT NULL, version INTEGER NOT NULL, digest TEXT NOT NULL, signer TEXT NOT NULL,
    first_seen REAL NOT NULL, last_seen REAL NOT NULL, loads INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (name, version));
CREATE TABLE IF NOT EXISTS definition_pins (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, actor TEXT NOT NULL, at REAL NOT NULL);
ALTER TABLE runs ADD COLUMN signer TEXT;
"""


class DefinitionsMixin:
    """SQLite implementation; expects ``_tx``, ``_read`` and ``_audit`` from the store."""

    def register_definition(self, name: str, version: int, digest: str, signer: str, now: float, *,
                            pin: bool = False, actor: str = "system") -> DefinitionRecord:
        with self._tx() as c:
            row = c.execute("SELECT digest FROM definitions WHERE name = ? AND version = ?", (name, version)).fetchone()
            if row is not None and row[0] != digest:
                self._audit(c, now, None, None, "definition.refused", actor, None, None,
                            {"name": name, "version": version, "digest": digest, "recorded": row[0],
                             "reason": "second-digest"})
                raise DefinitionRefused("second-digest", (
                    f"{name} v{version} is already recorded with digest {row[0]}, and this file has {digest}: "
                    "a signed version never changes; bump the version and sign it again"))
            highest = c.execute("SELECT MAX(version) FROM definitions WHERE name = ?", (name,)).fetchone()[0]
            pinned = c.execute("SELECT version FROM definition_pins WHERE name = ?", (name,)).fetchone()
            if highest is not None and version < highest and not pin and not (pinned and pinned[0] == version):
                self._audit(c, now, None, None, "definition.refused", actor, None, None,
                            {"name": name, "version": version, "digest": digest, "highest": highest,
                             "reason": "rollback"})
                raise DefinitionRefused("rollback", (
                    f"{name} v{version} is older than v{highest}, already run on this store: a rollback needs "
                    "an operator's pin (--pin-version), which is audited"))
            if row is None:
                c.execute("INSERT INTO definitions (name, version, digest, signer, first_seen, last_seen) "
                          "VALUES (?,?,?,?,?,?)", (name, version, digest, signer, now, now))
                self._audit(c, now, None, None, "definition.recorded", actor, None, None,
                            {"name": name, "version": version, "digest": digest, "signer": signer})
            else:
                c.execute("UPDATE definitions SET last_seen = ?, loads = loads + 1, signer = ? WHERE name = ? AND "
                          "version = ?", (now, signer, name, version))
            if pin:
                c.execute("INSERT INTO definition_pins (name, version, actor, at) VALUES (?,?,?,?) "
                          "ON CONFLICT(name) DO UPDATE SET version = excluded.version, actor = excluded.actor, "
                          "at = excluded.at", (name, version, actor, now))
                self._audit(c, now, None, None, "definition.pinned", actor, None, None,
                            {"name": name, "version": version, "digest": digest, "highest": highest})
            elif pinned and highest is not None and version >= highest and pinned[0] != version:
                c.execute("DELETE FROM definition_pins WHERE name = ?", (name,))
                self._audit(c, now, None, None, "definition.unpinned", actor, None, None,
                            {"name": name, "version": version, "was_pinned": pinned[0]})
        return next(d for d in self.definitions(name) if d.version == version)

    def definitions(self, name: str | None = None) -> list[DefinitionRecord]:
        where, args = ("WHERE d.name = ?", (name,)) if name else ("", ())
        got = self._read("SELECT d.name, d.version, d.digest, d.signer, d.first_seen, d.last_seen, d.loads, "
                         "p.version FROM definitions d LEFT JOIN definition_pins p ON p.name = d.name "
                         f"{where} ORDER BY d.name, d.version", args)
        highest: dict[str, int] = {}
        for r in got:
            highest[r[0]] = max(highest.get(r[0], 0), r[1])
        out = []
        for n, v, digest, signer, first, last, loads, pin in got:
            active = v == (pin if pin is not None else highest[n])
            out.append(DefinitionRecord(n, v, digest, signer, first, last, loads, active, pin == v))
        return out

    def record_signer(self, run_id: str, signer: str) -> None:
        with self._tx() as c:
            c.execute("UPDATE runs SET signer = ? WHERE id = ?", (signer, run_id))

    def run_signer(self, run_id: str) -> str | None:
        got = self._read("SELECT signer FROM runs WHERE id = ?", (run_id,))
        return got[0][0] if got else None
