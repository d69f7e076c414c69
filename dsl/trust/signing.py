"""Offline signing: Ed25519 keys and DSSE envelopes over the exact bytes of a definition.

A DSSE envelope (https://github.com/secure-systems-lab/dsse) is JSON::

    {"payload": <base64 of the file's bytes>, "payloadType": PAYLOAD_TYPE,
     "signatures": [{"keyid": <hint>, "sig": <base64 Ed25519 signature>}]}

and each signature is over ``PAE(payloadType, payload)``, so the type is signed too.
The ``keyid`` is an unauthenticated hint: by default the sha256 (hex) of the public
key's DER encoding. Which key is trusted, and for what, is the trust policy's business
(:mod:`sealflow.dsl.trust`), never the envelope's.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sealflow.dsl.errors import DslError

#: The payload type of a signed Sealflow definition: the YAML file, byte for byte.
PAYLOAD_TYPE = "application/vnd.sealflow.definition+yaml"
#: Envelopes are small (the payload is a definition of at most 1 MiB, base64-encoded).
MAX_ENVELOPE_BYTES = 4 * 1024 * 1024
MAX_SIGNATURES = 16


class SigningError(DslError):
    """A key or an envelope cannot be used (unreadable, wrong type, malformed)."""


@dataclasses.dataclass(frozen=True)
class Signature:
    keyid: str
    sig: bytes


@dataclasses.dataclass(frozen=True)
class Envelope:
    payload: bytes
    payload_type: str
    signatures: tuple[Signature, ...]


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: ``DSSEv1 len(type) type len(body) body``."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


# ---------------------------------------------------------------- keys

def generate_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def private_pem(key: Ed25519PrivateKey) -> bytes:
    """PKCS#8 PEM, unencrypted (protect the file: keygen writes it with mode 0600)."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def key_id(key: Ed25519PublicKey) -> str:
    """sha256 (hex) of the public key's DER (SubjectPublicKeyInfo) encoding."""
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def load_private_key(data: bytes, source: str = "key") -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise SigningError(f"{source}: the private key is encrypted; sealflow reads unencrypted PKCS#8 keys "
                           "(keep the file at mode 0600)") from None
    except (ValueError, binascii.Error) as exc:
        raise SigningError(f"{source}: not a PEM private key ({_short(exc)})") from None
    except Exception as exc:  # the PEM parser raises a few other kinds on garbage (e.g. UnsupportedAlgorithm)
        raise SigningError(f"{source}: not a usable private key ({type(exc).__name__})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(f"{source}: a {type(key).__name__.lstrip('_')}, not an Ed25519 private key")
    return key


def load_public_key(data: bytes, source: str = "key") -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, binascii.Error) as exc:
        raise SigningError(f"{source}: not a PEM public key ({_short(exc)})") from None
    except Exception as exc:
        raise SigningError(f"{source}: not a usable public key ({type(exc).__name__})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningError(f"{source}: a {type(key).__name__.lstrip('_')}, not an Ed25519 public key")
    return key


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:120]


# ---------------------------------------------------------------- envelopes

def sign(payload: bytes, key: Ed25519PrivateKey, *, keyid: str | None = None,
         payload_type: str = PAYLOAD_TYPE) -> Envelope:
    """A DSSE envelope over ``payload`` with one Ed25519 signature."""
    sig = key.sign(pae(payload_type, payload))
    return Envelope(payload, payload_type, (Signature(keyid or key_id(key.public_key()), sig),))


def to_json(envelope: Envelope) -> bytes:
    body = {
        "payload": base64.b64encode(envelope.payload).decode("ascii"),
        "payloadType": envelope.payload_type,
        "signatures": [{"keyid": s.keyid, "sig": base64.b64encode(s.sig).decode("ascii")}
                       for s in envelope.signatures],
    }
    return (json.dumps(body, indent=2) + "\n").encode("utf-8")


def _b64(value: Any, what: str) -> bytes:
    """Standard or URL-safe base64, padded or not (as DSSE allows); anything else is refused."""
    if not isinstance(value, str):
        raise SigningError(f"{what} is not a base64 string")
    text = value.strip()
    text += "=" * (-len(text) % 4)
    try:
        if "-" in text or "_" in text:
            return base64.b64decode(text, altchars=b"-_", validate=True)
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SigningError(f"{what} is not valid base64") from None


def parse(data: bytes) -> Envelope:
    """Parse a DSSE envelope; raise :class:`SigningError` saying what is wrong with it."""
    if len(data) > MAX_ENVELOPE_BYTES:
        raise SigningError(f"envelope is {len(data)} bytes, over the limit of {MAX_ENVELOPE_BYTES}")
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SigningError(f"not JSON ({_short(exc)})") from None
    if not isinstance(body, dict):
        raise SigningError("not a DSSE envelope (expected a JSON object)")
    missing = [k for k in ("payload", "payloadType", "signatures") if k not in body]
    if missing:
        raise SigningError(f"not a DSSE envelope (missing {', '.join(missing)})")
    if not isinstance(body["payloadType"], str):
        raise SigningError("payloadType is not a string")
    payload = _b64(body["payload"], "payload")
    sigs = body["signatures"]
    if not isinstance(sigs, list) or not sigs:
        raise SigningError("signatures must be a non-empty list")
    if len(sigs) > MAX_SIGNATURES:
        raise SigningError(f"more than {MAX_SIGNATURES} signatures")
    out = []
    for i, s in enumerate(sigs):
        if not isinstance(s, dict) or "sig" not in s:
            raise SigningError(f"signatures[{i}] has no 'sig'")
        keyid = s.get("keyid", "")
        if not isinstance(keyid, str):
            raise SigningError(f"signatures[{i}].keyid is not a string")
        out.append(Signature(keyid, _b64(s["sig"], f"signatures[{i}].sig")))
    return Envelope(payload, body["payloadType"], tuple(out))


def verify_signature(envelope: Envelope, signature: Signature, key: Ed25519PublicKey) -> bool:
    """True when ``signature`` is ``key``'s signature over PAE(type, payload)."""
    try:
        key.verify(signature.sig, pae(envelope.payload_type, envelope.payload))
    except InvalidSignature:
        return False
    return True


__all__ = [
    "PAYLOAD_TYPE", "Envelope", "Signature", "SigningError", "pae", "generate_key", "private_pem", "public_pem",
    "key_id", "load_private_key", "load_public_key", "sign", "to_json", "parse", "verify_signature",
]
