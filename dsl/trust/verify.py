"""Verification of a signed definition against a trust policy (:mod:`sealflow.dsl.trust.policy`).

The policy names who may sign; the namespace of a definition is the name part of its
``owner`` (``team:sales`` -> ``sales``). The policy itself is :mod:`sealflow.dsl.trust.policy`.

Verification, in order, over bytes read once:

1. the signature: a DSSE envelope (``FILE.dsse.json``) against the policy's keys, or a
   Sigstore bundle (``FILE.sigstore.json``) against the pinned root and identities,
   fully offline;
2. the definition: those same bytes validate and compile;
3. the namespace: the signer is allowed for the definition's namespace.

Anything else is a :class:`Refused` with a reason and a message. Sigstore is imported
only on the code paths that verify a Sigstore bundle.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sealflow.dsl.loader import DEFAULT_LIMITS
from sealflow.dsl.trust import signing
from sealflow.dsl.trust.policy import (
    DSSE_SUFFIX,
    MAX_BUNDLE_BYTES,
    SIGSTORE,
    SIGSTORE_SUFFIX,
    Key,
    Refused,
    TrustPolicy,
    first_line,
)

if TYPE_CHECKING:  # sigstore is optional at run time (the sigstore extra)
    from cryptography import x509
    from sigstore.models import Bundle

    from sealflow.dsl.model import ActionInfo
    from sealflow.dsl.plan import Plan


# ---------------------------------------------------------------- verification

@dataclasses.dataclass(frozen=True)
class Verified:
    """A definition whose bytes a trusted signer signed."""

    path: str
    method: Literal["key", "sigstore"]
    #: the policy's name for the signer: a key id, or "sigstore"
    signer: str
    #: key: id, fingerprint, expires; sigstore: identity, issuer, repository, ref, workflow (from the certificate)
    details: dict[str, str]
    name: str = ""
    version: int = 0
    digest: str = ""
    namespace: str = ""
    signature_file: str = ""
    #: the plan compiled from exactly the verified bytes
    plan: Any = dataclasses.field(default=None, compare=False, repr=False)
    #: the verified bytes and the signature file's bytes (DSSE envelope or Sigstore bundle)
    source: bytes = dataclasses.field(default=b"", compare=False, repr=False)
    envelope: bytes = dataclasses.field(default=b"", compare=False, repr=False)
    #: the workflows the plan calls, each verified under the same policy (each with its own calls)
    called: tuple[Verified, ...] = dataclasses.field(default=(), compare=False, repr=False)

    @property
    def envelope_kind(self) -> str:
        return "dsse" if self.method == "key" else "sigstore"

    def principal(self) -> str:
        """Who signed, independent of any policy's labels: ``key:<sha256 fingerprint of the public key>``
        or ``sigstore:<identity>@<issuer>``. A key id is scoped to the policy that defines it, so a
        recorded signer is never the id alone."""
        d = self.details
        if self.method == "key":
            return f"key:{d['fingerprint']}"
        return f"sigstore:{d.get('identity', '?')}@{d.get('issuer', '?')}"

    def who(self) -> str:
        d = self.details
        if self.method == "key":
            text = f"key {self.signer} (sha256 {d['fingerprint'][:16]}...)"
            return text + (f", expires {d['expires']}" if d.get("expires") else "")
        parts = [f"issuer {d.get('issuer', '?')}"]
        parts += [f"{k} {d[k]}" for k in ("repository", "ref") if d.get(k)]
        return f"{d.get('identity', '?')} ({', '.join(parts)})"

    def as_dict(self) -> dict[str, Any]:
        return {"verified": True, "path": self.path, "method": self.method, "signer": self.signer,
                "details": self.details, "name": self.name, "version": self.version, "digest": self.digest,
                "namespace": self.namespace, "signature_file": self.signature_file}


def namespace_of(owner: str) -> str:
    """``team:sales`` -> ``sales``: the name part of the owner."""
    return owner.split(":", 1)[1] if ":" in owner else owner


def signature_files(path: str | Path) -> list[Path]:
    """The signature files beside ``path`` that exist: Sigstore bundle first, then DSSE envelope."""
    p = Path(path)
    return [q for q in (Path(str(p) + SIGSTORE_SUFFIX), Path(str(p) + DSSE_SUFFIX)) if q.is_file()]


def bundle_kind(raw: bytes) -> Literal["dsse", "sigstore"]:
    """Tell a DSSE envelope from a Sigstore bundle by its content."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Refused("malformed-bundle", f"the signature file is not JSON ({first_line(exc)})") from None
    if isinstance(body, dict):
        if str(body.get("mediaType", "")).startswith("application/vnd.dev.sigstore.bundle"):
            return "sigstore"
        if "payloadType" in body or "signatures" in body:
            return "dsse"
    raise Refused("malformed-bundle", "the signature file is neither a DSSE envelope (payload, payloadType, "
                  "signatures) nor a Sigstore bundle (mediaType application/vnd.dev.sigstore.bundle...)")


def _read(path: Path, what: str, limit: int) -> bytes:
    try:
        if path.stat().st_size > limit:
            raise Refused("malformed-bundle", f"{what} {path} is over {limit} bytes")
        return path.read_bytes()
    except IsADirectoryError:
        raise Refused("malformed-bundle", f"{what} {path} is a directory, not a file") from None
    except FileNotFoundError:
        raise Refused("unsigned", f"{what} {path} does not exist") from None
    except OSError as exc:
        raise Refused("malformed-bundle", f"{what} {path} cannot be read: {exc.strerror or exc}") from None


def verify_file(path: str | Path, policy: TrustPolicy, *, bundle: str | Path | None = None,
                now: dt.datetime | None = None, actions: dict[str, ActionInfo] | None = None) -> Verified:
    """Verify the definition at ``path`` (its bytes read once) with its signature file or ``bundle``."""
    p = Path(path)
    try:
        if p.stat().st_size > DEFAULT_LIMITS.max_bytes:
            raise Refused("invalid-definition", f"{p} is over {DEFAULT_LIMITS.max_bytes} bytes: not a definition")
        data = p.read_bytes()
    except OSError as exc:
        raise Refused("unsigned", f"{p} cannot be read: {exc.strerror or exc}") from None
    if bundle is not None:
        candidates = [Path(bundle)]
    else:
        candidates = signature_files(p)
        if not candidates:
            raise Refused("unsigned", f"{p} is not signed: neither {p.name}{SIGSTORE_SUFFIX} nor "
                          f"{p.name}{DSSE_SUFFIX} exists beside it",
                          "sign it in CI (sealflow sign), or pass the signature file with --bundle")
    refusals: list[Refused] = []
    for candidate in candidates:
        try:
            return verify_bytes(data, str(p), _read(candidate, "signature file", MAX_BUNDLE_BYTES), policy,
                                now=now, signature_file=str(candidate), actions=actions)
        except Refused as exc:
            refusals.append(exc)
    # the most telling reason: a signature of a kind the policy accepts, over one it does not accept at all
    raise next((r for r in refusals if not r.unsupported), refusals[0])


def verify_bytes(data: bytes, path: str, signature: bytes, policy: TrustPolicy, *,
                 now: dt.datetime | None = None, signature_file: str = "", actions: dict[str, ActionInfo] | None = None,
                 root: Path | None = None) -> Verified:
    """Verify ``data`` with ``signature`` (a DSSE envelope or a Sigstore bundle), then check the definition
    (its referenced files read under ``root``; None: the repository root of ``path``)."""
    kind = bundle_kind(signature)
    signers: Sequence[Key | str]
    method: Literal["key", "sigstore"]
    details: dict[str, str] | None
    if kind == "dsse":
        signers, method, details = verify_envelope(data, signature, policy, now=now), "key", None
    else:
        signers, method, details = [SIGSTORE], "sigstore", verify_sigstore(data, signature, policy)
    verified = _check_definition(data, path, policy, signers, method, details, signature_file, actions, root)
    called = () if verified.plan is None else \
        _check_called(verified.plan, path, policy, now=now, actions=actions, root=root)
    return dataclasses.replace(verified, source=data, envelope=signature, called=called)


def _check_called(plan: Plan, path: str, policy: TrustPolicy, *, now: dt.datetime | None,
                  actions: dict[str, ActionInfo] | None, root: Path | None) -> tuple[Verified, ...]:
    """Every workflow ``plan`` calls is signed and trusted under the same ``policy``, and is the plan its call
    pins (each checks its own calls in turn). The files are read as the compile found them (beside the caller,
    in definitions/, under the root) and recorded: an executing process verifies them again from the store."""
    from sealflow.dsl.compile_call import find_called
    from sealflow.dsl.refs import read_recorded, repository_root

    base = root if root is not None else repository_root(path)
    verified: dict[str, Verified] = {}
    for step, call in plan.called():
        if call.digest in verified:  # (called twice: verified once)
            continue
        what = f"{plan.name} v{plan.version} calls {call.workflow} v{call.version} (step {step.id!r})"
        found, why = find_called(path, base, call.workflow, call.version)
        rel = None if found is None else str(found.resolve().relative_to(base.resolve()))
        text = None if rel is None else read_recorded(base, rel)
        if rel is None or text is None:
            raise Refused("untrusted-child", f"{what}, which cannot be read: {why or rel}")
        signatures = [s for s in (read_recorded(base, rel + suffix) for suffix in (SIGSTORE_SUFFIX, DSSE_SUFFIX))
                      if s is not None]
        if not signatures:
            raise Refused("untrusted-child", f"{what}, which is not signed: neither {rel}{SIGSTORE_SUFFIX} nor "
                          f"{rel}{DSSE_SUFFIX} exists", "sign the called workflow too (sealflow sign), in the same "
                                                        "review")
        refusals: list[Refused] = []
        for signature in signatures:
            try:
                v = verify_bytes(text.encode(), str(found), signature.encode(), policy, now=now, actions=actions,
                                 root=root)
            except Refused as exc:
                refusals.append(exc)
                continue
            if v.digest != call.digest:
                raise Refused("untrusted-child", f"{what}: the signed file compiles to {v.digest[:19]}..., not the "
                              f"{call.digest[:19]}... the caller pins", "compile and sign both again")
            verified[call.digest] = v
            break
        else:
            first = next((r for r in refusals if not r.unsupported), refusals[0])
            raise Refused("untrusted-child", f"{what}, which this trust policy does not trust: [{first.reason}] "
                          f"{first.message}", first.hint)
    return tuple(verified.values())


def verify_envelope(data: bytes, envelope_bytes: bytes, policy: TrustPolicy, *,
                    now: dt.datetime | None = None) -> list[Key]:
    """The policy keys (not expired) whose signature in the DSSE envelope covers exactly ``data``."""
    try:
        envelope = signing.parse(envelope_bytes)
    except signing.SigningError as exc:
        raise Refused("malformed-bundle", f"malformed DSSE envelope: {exc}") from None
    if envelope.payload_type != signing.PAYLOAD_TYPE:
        raise Refused("wrong-payload-type", f"the envelope holds {envelope.payload_type!r}, not a Sealflow "
                      f"definition ({signing.PAYLOAD_TYPE})")
    if envelope.payload != data:
        raise Refused("tampered", "the file's bytes differ from the payload signed in the envelope "
                      "(the file changed after signing, or the envelope is for another file)",
                      "review the change and sign the file again")
    if not policy.keys:
        raise Refused("unknown-signer", "the policy lists no keys, so a DSSE envelope cannot be trusted",
                      "add the signer's public key under keys:, or sign with Sigstore in CI", unsupported=True)
    now = now or dt.datetime.now(dt.UTC)
    good: list[Key] = []
    expired: list[Key] = []
    broken: list[str] = []
    unknown: list[str] = []
    for s in envelope.signatures:
        hinted = [k for k in policy.keys if s.keyid in (k.id, k.fingerprint)]
        # The keyid is an unauthenticated hint: try the hinted keys first, then every other key.
        for k in hinted + [k for k in policy.keys if k not in hinted]:
            if signing.verify_signature(envelope, s, k.public_key):
                (expired if k.expired(now) else good).append(k)
                break
        else:
            (broken if hinted else unknown).append(s.keyid)
    if good:
        return good
    if expired:
        k = expired[0]
        raise Refused("expired-key", f"signed by key {k.id}, which expired ({k.expires_text})",
                      "sign again with a current key, and list it in the policy")
    if broken:
        raise Refused("tampered", f"the signature by key {broken[0]} does not verify: the envelope was altered",
                      "sign the file again")
    trusted = ", ".join(k.id for k in policy.keys)
    raise Refused("unknown-signer", f"signed by an unknown key (keyid {unknown[0][:64]}); the policy trusts "
                  f"keys: {trusted}", "add the signer's public key to the policy's keys, after review")


def _bundle_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return {}
    return body if isinstance(body, dict) else {}


def verify_sigstore(data: bytes, bundle_bytes: bytes, policy: TrustPolicy) -> dict[str, str]:
    """Verify a Sigstore bundle over ``data`` offline; the signer's certificate claims on success."""
    if policy.trusted_root is None or not policy.identities:
        raise Refused("unknown-signer", "the policy has no sigstore section, so a Sigstore bundle cannot be trusted",
                      "add sigstore: {trusted_root, identities} to the policy", unsupported=True)
    try:
        from sigstore.errors import Error
        from sigstore.models import Bundle
        from sigstore.verify.policy import AnyOf
    except ImportError:
        raise Refused("sigstore-missing", "verifying a Sigstore bundle needs the sigstore package",
                      "pip install 'sealflow[sigstore]'") from None

    try:
        bundle = Bundle.from_json(bundle_bytes)
    except Error as exc:
        raise Refused("malformed-bundle", f"malformed Sigstore bundle: {first_line(exc)}") from None
    except Exception as exc:
        raise Refused("malformed-bundle", f"malformed Sigstore bundle: {type(exc).__name__}: "
                      f"{first_line(exc)}") from None
    verifier = policy.sigstore_verifier()
    identity_policy = AnyOf([i.sigstore_policy() for i in policy.identities])
    raw = _bundle_json(bundle_bytes)
    try:
        if "dsseEnvelope" in raw:
            payload_type, payload = verifier.verify_dsse(bundle, identity_policy)
        else:
            verifier.verify_artifact(data, bundle, identity_policy)
    except Error as exc:
        raise _classify(exc, data, bundle, raw, policy) from None
    except Exception as exc:  # a bundle that parses but holds nonsense (bad certificate bytes, ...)
        raise Refused("malformed-bundle", f"the Sigstore bundle cannot be verified: {type(exc).__name__}: "
                      f"{first_line(exc)}") from None
    if "dsseEnvelope" in raw:
        if payload_type != signing.PAYLOAD_TYPE:
            raise Refused("wrong-payload-type", f"the bundle's envelope holds {payload_type!r}, not a Sealflow "
                          f"definition ({signing.PAYLOAD_TYPE})")
        if payload != data:
            raise Refused("tampered", "the file's bytes differ from the payload signed in the bundle")
    return _claims(bundle.signing_certificate)


def _classify(exc: Exception, data: bytes, bundle: Bundle, raw: dict[str, Any], policy: TrustPolicy) -> Refused:
    """Name the reason a Sigstore verification failed, whatever order sigstore checked in."""
    message = first_line(exc)
    recorded = (raw.get("messageSignature") or {}).get("messageDigest") or {}
    if recorded.get("digest"):
        import base64

        try:
            if base64.b64decode(recorded["digest"]) != hashlib.sha256(data).digest():
                return Refused("tampered", "the file's bytes differ from what was signed (bundle message digest "
                               "mismatch)", "review the change and let CI sign the file again")
        except (ValueError, TypeError):
            pass
    if "signature is invalid" in message.lower():
        return Refused("tampered", f"the signature does not verify over the file: {message}")
    try:
        cert = bundle.signing_certificate
        matched = False
        for ident in policy.identities:
            try:
                ident.sigstore_policy().verify(cert)
                matched = True
                break
            except Exception:
                continue
        if not matched:
            claims = _claims(cert)
            got = ", ".join(f"{k} {v}" for k, v in claims.items())
            allowed = "; ".join(i.describe() for i in policy.identities)
            return Refused("wrong-identity", f"signed by an identity the policy does not list ({got}); "
                           f"the policy accepts: {allowed}")
    except Exception:  # pragma: no cover - a certificate sigstore parsed but we cannot read
        pass
    return Refused("wrong-root", f"the bundle does not verify against the pinned trusted root "
                   f"{policy.trusted_root}: {message}",
                   "check that the policy pins the root of the Sigstore instance that signed (production or "
                   "staging), refreshed from CI")


_OID_ISSUER_V1 = "1.3.6.1.4.1.57264.1.1"
_OID_REPOSITORY = "1.3.6.1.4.1.57264.1.5"
_OID_REF = "1.3.6.1.4.1.57264.1.6"


def _claims(cert: x509.Certificate) -> dict[str, str]:
    """The signer as the certificate names it: identity (SAN), issuer, repository, ref."""
    from cryptography import x509

    out: dict[str, str] = {}
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = san.get_values_for_type(x509.RFC822Name) + san.get_values_for_type(x509.UniformResourceIdentifier)
        if names:
            out["identity"] = names[0]
    except x509.ExtensionNotFound:
        pass
    for oid, key in ((_OID_ISSUER_V1, "issuer"), (_OID_REPOSITORY, "repository"), (_OID_REF, "ref")):
        try:
            ext = cert.extensions.get_extension_for_oid(x509.ObjectIdentifier(oid))
        except x509.ExtensionNotFound:
            continue
        if isinstance(ext.value, x509.UnrecognizedExtension):  # Fulcio's OIDs: raw bytes
            out[key] = ext.value.value.decode("utf-8", "replace")
    return out


def _check_definition(data: bytes, path: str, policy: TrustPolicy, signers: Sequence[Key | str],
                      method: Literal["key", "sigstore"],
                      details: dict[str, Any] | None, signature_file: str, actions: dict[str, ActionInfo] | None = None,
                      root: Path | None = None) -> Verified:
    """After the signature: the same bytes compile, and a signer is allowed for their namespace."""
    from sealflow.dsl.api import check_bytes

    result = check_bytes(data, path, actions=actions, root=root)
    if result.plan is None or result.errors:
        first = (result.errors or result.diagnostics)[0].format().splitlines()[0]
        raise Refused("invalid-definition", f"signed, but not a valid definition: {first}",
                      "run sealflow validate on it")
    plan = result.plan
    namespace = namespace_of(plan.owner)
    allowed = policy.allowed_signers(namespace)
    names = [s if isinstance(s, str) else s.id for s in signers]
    chosen = next((s for s, n in zip(signers, names, strict=True) if allowed is None or n in allowed), None)
    if chosen is None:
        listed = ", ".join(allowed) if allowed else "nobody (not listed in namespaces)"
        who = f" ({details['identity']})" if details and details.get("identity") else ""
        raise Refused("namespace", f"signer {names[0]}{who} not allowed for namespace {namespace} (owner "
                      f"{plan.owner}); allowed: {listed}",
                      "add the signer under namespaces in the policy, after review")
    if isinstance(chosen, Key):
        signer, details = chosen.id, {"key": chosen.id, "fingerprint": chosen.fingerprint,
                                      **({"expires": chosen.expires_text} if chosen.expires_text else {})}
    else:
        signer = SIGSTORE
    return Verified(path, method, signer, dict(details or {}), plan.name, plan.version, plan.digest, namespace,
                    signature_file, plan)

