"""Audit anchors: each tenant's chain head, kept outside the store, so a cut tail or a wiped tenant shows.

The hash chain (:mod:`sealflow.store.auditchain`) finds an event edited, deleted, inserted
or reordered, and a tail deleted while the head record stayed. It cannot see a tail cut *with* its head
moved back to the new last event, a whole tenant wiped (events and head), or a chain recomputed from
scratch: what is left is consistent. An anchor, taken now and kept where the store's writers cannot
reach, makes those visible later. It is a JSON document::

    {"sealflow_audit_anchor": 1, "taken_at": 1700000000.0,
     "tenants": {"acme": {"head_hash": "<sha256 hex>", "count": 42, "at": 1699999990.0}, ...},
     "signature": {"keyid": "<sha256 of the public key>", "sig": "<base64 Ed25519>"}}

``count`` is the number of events of the tenant's chain (its head's ``seq``), ``head_hash`` the hash of
the last one and ``at`` its timestamp. ``signature`` is optional: the operator's Ed25519 key (a
``sealflow keygen`` key, as for definitions: :mod:`sealflow.dsl.trust.signing`) over DSSE's
pre-authentication encoding of :data:`ANCHOR_TYPE` and the canonical JSON (sorted keys, compact, UTF-8)
of the document without ``signature``.

:func:`take` refuses a chain that does not verify (an anchor of a broken chain vouches for nothing).
:func:`check` finds, per anchored tenant, that its chain still holds the anchored head at the anchored
``count`` (and so extends it): otherwise the tenant was ``wiped`` (no events left), ``cut`` (fewer
events than anchored) or ``rewritten`` (another event at the anchored place). Tenants that appeared
after the anchor are not in it and are not checked by it.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sealflow.dsl.trust import signing
from sealflow.store.auditchain import Break, verify_tenant

if TYPE_CHECKING:
    from sealflow.store.audit import AuditLog

ANCHOR_TYPE = "application/vnd.sealflow.audit-anchor+json"
FORMAT = 1
MAX_ANCHOR_BYTES = 16 * 1024 * 1024
_FIELD = "sealflow_audit_anchor"


class AnchorError(ValueError):
    """An anchor that cannot be taken, read or trusted (the message says why and where)."""


def _canonical(doc: dict[str, Any]) -> bytes:
    body = {k: v for k, v in doc.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def take(store: AuditLog, now: float, tenant: str | None = None, *, only: list[str | None] | None = None
         ) -> dict[str, Any]:
    """The anchor of every tenant's chain in ``store`` (or of ``tenant``'s, or of the chains ``only`` names);
    :class:`AnchorError` naming the first break when a chain does not verify."""
    heads = store.audit_heads()
    names: Sequence[str | None]
    if only is not None:
        names = list(only)
    else:
        names = [tenant] if tenant is not None else sorted(
            set(heads) | {t for t in store.audit_tenants() if t is not None})
    tenants: dict[str | None, dict[str, Any]] = {}
    for name in names:
        head, rows = store.audit_snapshot(name)  # read together: a live store appends meanwhile
        count, last, broken = verify_tenant(name, rows, head)
        if broken is not None:
            raise AnchorError(f"tenant {name or '(system)'}: {broken.message}; an anchor of a broken chain vouches "
                              "for nothing (run `sealflow audit verify`)")
        if count:
            tenants[name] = {"head_hash": last, "count": count, "at": rows[-1][5]}
    return {_FIELD: FORMAT, "taken_at": now, "tenants": tenants}


def sign(doc: dict[str, Any], key_pem: bytes, source: str = "key") -> dict[str, Any]:
    """``doc`` with the Ed25519 signature of the private key ``key_pem`` (``SigningError`` if unusable)."""
    key = signing.load_private_key(key_pem, source)
    sig = key.sign(signing.pae(ANCHOR_TYPE, _canonical(doc)))
    return {**doc, "signature": {"keyid": signing.key_id(key.public_key()),
                                 "sig": base64.b64encode(sig).decode("ascii")}}


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False)


def load(data: bytes, source: str = "anchor") -> dict[str, Any]:
    """Parse an anchor document; :class:`AnchorError` saying what is wrong with it."""
    if len(data) > MAX_ANCHOR_BYTES:
        raise AnchorError(f"{source}: {len(data)} bytes, over the limit of {MAX_ANCHOR_BYTES}")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AnchorError(f"{source}: not JSON ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(doc, dict) or doc.get(_FIELD) != FORMAT:
        raise AnchorError(f"{source}: not a sealflow audit anchor (no \"{_FIELD}\": {FORMAT}); make one with "
                          "`sealflow audit head --json`")
    tenants = doc.get("tenants")
    if not isinstance(tenants, dict):
        raise AnchorError(f"{source}: \"tenants\" must be a map of tenant -> head")
    for name, head in tenants.items():
        where = f"{source}: tenant {name!r}"
        if not isinstance(head, dict):
            raise AnchorError(f"{where}: expected {{head_hash, count, at}}")
        if not isinstance(head.get("head_hash"), str) or len(head["head_hash"]) != 64:
            raise AnchorError(f"{where}: head_hash must be a sha256 in hex")
        count = head.get("count")
        if type(count) is not int or count < 1:
            raise AnchorError(f"{where}: count must be a whole number of events, at least 1")
        at = head.get("at")
        if not isinstance(at, (int, float)) or isinstance(at, bool) or not math.isfinite(at):
            raise AnchorError(f"{where}: at must be a timestamp")
    sig = doc.get("signature")
    if sig is not None and (not isinstance(sig, dict) or not isinstance(sig.get("sig"), str)
                            or not isinstance(sig.get("keyid", ""), str)):
        raise AnchorError(f"{source}: \"signature\" must be {{keyid, sig}}")
    return doc


def check_signature(doc: dict[str, Any], public_pem: bytes, source: str = "anchor",
                    key_source: str = "public key") -> str:
    """Raise :class:`AnchorError` unless ``doc`` carries a valid signature of ``public_pem``; return the key id."""
    key = signing.load_public_key(public_pem, key_source)
    sig = doc.get("signature")
    if sig is None:
        raise AnchorError(f"{source}: not signed, but a public key was given to check it with; sign anchors "
                          "with `sealflow audit head --json --key KEY`")
    try:
        raw = base64.b64decode(sig["sig"], validate=True)
    except (binascii.Error, ValueError):
        raise AnchorError(f"{source}: signature.sig is not valid base64") from None
    try:
        key.verify(raw, signing.pae(ANCHOR_TYPE, _canonical(doc)))
    except Exception:  # noqa: BLE001 - InvalidSignature, or a signature of the wrong length
        raise AnchorError(f"{source}: the signature does not verify with {key_source}: the anchor was altered, "
                          "or signed by another key") from None
    return signing.key_id(key)


def check(store: AuditLog, doc: dict[str, Any], tenant: str | None = None) -> list[Break]:
    """Per anchored tenant (only ``tenant`` when given), a :class:`Break` when its chain no longer holds the
    anchored head at the anchored count. The chain's own integrity is :func:`auditchain.verify`'s job."""
    breaks: list[Break] = []
    for name, head in sorted(doc["tenants"].items()):
        if tenant is not None and name != tenant:
            continue
        label = name or "(system)"
        count, anchored = head["count"], head["head_hash"]
        rows = store.audit_chain(name)
        if not rows:
            breaks.append(Break(name, None, None, "wiped",
                                f"tenant {label}: the anchor holds {count} event(s) up to {anchored[:16]}, the store "
                                "none: the tenant's audit was wiped"))
            continue
        at = next((r for r in rows if r[2] == count), None)
        last = max((r[2] for r in rows if r[2] is not None), default=0)
        if at is None and last < count:
            breaks.append(Break(name, None, last, "cut",
                                f"tenant {label}: the chain ends at seq {last} but the anchor holds seq {count}: the "
                                f"last {count - last} event(s) were cut (the head moved back with them)"))
        elif at is None or at[4] != anchored:
            breaks.append(Break(name, None if at is None else at[0], count, "rewritten",
                                f"tenant {label}: the event at seq {count} is not the anchored one "
                                f"({anchored[:16]}): the chain was rewritten since the anchor"))
    return breaks
