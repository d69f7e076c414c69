"""The trust policy, and verification of a signed definition against it.

A policy (YAML, ``schemas/trust-policy.schema.json``, see ``docs/trust.md``) names who may
sign: Sigstore identities checked against a pinned trusted root, offline Ed25519 keys,
and optionally which of them may sign for which namespace. The namespace of a
definition is the name part of its ``owner`` (``team:sales`` -> ``sales``).

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
import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from . import signing
from .errors import DefinitionError, Diagnostic, DslError
from .loader import DEFAULT_LIMITS, Document, load_file

POLICY_SCHEMA = "trust-policy.schema.json"
SIGSTORE = "sigstore"  # the signer name of every Sigstore identity in ``namespaces``
ANY_NAMESPACE = "*"
DSSE_SUFFIX = ".dsse.json"
SIGSTORE_SUFFIX = ".sigstore.json"
MAX_BUNDLE_BYTES = 4 * 1024 * 1024

#: Diagnostic codes of trust policy files (beyond the loader's Y and the schema's S codes).
POLICY_CODES: dict[str, tuple[str, str]] = {
    "T701": ("error", "a file the trust policy names (public key, trusted root) cannot be read"),
    "T702": ("error", "a public key is not an Ed25519 PEM public key"),
    "T703": ("error", "duplicate key id, or a key named 'sigstore'"),
    "T704": ("error", "namespaces names a signer the policy does not define"),
    "T705": ("error", "a Sigstore identity needs either identity, or repository and ref"),
    "T706": ("error", "invalid expiry date"),
    "T707": ("error", "the policy names no signer (neither sigstore nor keys)"),
}

#: Why a verification was refused (``Refused.reason``).
REASONS = {
    "unsigned": "no signature file for the definition",
    "tampered": "the bytes differ from what was signed, or a signature does not verify",
    "unknown-signer": "signed by a key or identity the policy does not trust",
    "wrong-identity": "a Sigstore certificate whose identity the policy does not list",
    "wrong-root": "a Sigstore bundle that does not verify against the pinned trusted root",
    "malformed-bundle": "the signature file is not a DSSE envelope or Sigstore bundle",
    "expired-key": "signed by a policy key past its expiry",
    "wrong-payload-type": "the envelope does not hold a Sealflow definition",
    "namespace": "the signer is not allowed for the definition's namespace",
    "invalid-definition": "the signed bytes are not a valid definition",
    "bad-policy": "the trust policy (or its trusted root) cannot be used",
    "sigstore-missing": "a Sigstore bundle, but the sigstore package is not installed",
}


class PolicyError(DefinitionError):
    """The trust policy is invalid; carries every located diagnostic."""


class Refused(DslError):
    """A definition is not trusted: ``reason`` (a key of REASONS) and a message saying why."""

    def __init__(self, reason: str, message: str, hint: str | None = None, *, unsupported: bool = False):
        assert reason in REASONS, reason
        self.reason, self.message, self.hint = reason, message, hint
        #: the policy does not accept this kind of signature at all (a weaker reason than any other)
        self.unsupported = unsupported
        super().__init__(message)


# ---------------------------------------------------------------- the policy

@dataclasses.dataclass(frozen=True)
class Identity:
    """One accepted Sigstore signer."""

    issuer: str
    identity: str | None = None
    repository: str | None = None
    ref: str | None = None
    workflow: str | None = None

    @property
    def san(self) -> str | None:
        """The exact certificate identity (SAN) required, if any."""
        if self.identity:
            return self.identity
        if self.workflow:
            if self.workflow.startswith("https://"):
                return self.workflow
            return f"https://github.com/{self.repository}/{self.workflow}@{self.ref}"
        return None

    def describe(self) -> str:
        if self.repository:
            text = f"repository {self.repository}, ref {self.ref}"
            if self.workflow:
                text += f", workflow {self.workflow}"
            return f"{text} (issuer {self.issuer})"
        return f"{self.identity} (issuer {self.issuer})"

    def sigstore_policy(self):
        from sigstore.verify import policy as sp

        if self.repository:
            checks = [sp.OIDCIssuer(self.issuer), sp.GitHubWorkflowRepository(self.repository),
                      sp.GitHubWorkflowRef(self.ref)]
            if self.workflow:
                checks.append(sp.Identity(identity=self.san, issuer=self.issuer))
            return sp.AllOf(checks)
        return sp.Identity(identity=self.identity, issuer=self.issuer)


@dataclasses.dataclass(frozen=True)
class Key:
    """One accepted offline Ed25519 signer."""

    id: str
    public_key: Any  # Ed25519PublicKey
    fingerprint: str  # sha256 of the DER public key, hex
    path: str
    expires: dt.datetime | None = None
    expires_text: str | None = None

    def expired(self, now: dt.datetime) -> bool:
        return self.expires is not None and now >= self.expires


@dataclasses.dataclass
class TrustPolicy:
    path: str
    trusted_root: Path | None = None
    identities: tuple[Identity, ...] = ()
    keys: tuple[Key, ...] = ()
    #: namespace -> allowed signers (key ids or "sigstore"); None: every trusted signer, every namespace
    namespaces: dict[str, tuple[str, ...]] | None = None
    _verifier: Any = dataclasses.field(default=None, repr=False, compare=False)

    def allowed_signers(self, namespace: str) -> tuple[str, ...] | None:
        """The signers allowed for ``namespace``; None when the policy does not narrow."""
        if self.namespaces is None:
            return None
        if namespace in self.namespaces:
            return self.namespaces[namespace]
        return self.namespaces.get(ANY_NAMESPACE, ())

    def sigstore_verifier(self):
        """A Sigstore verifier built from the pinned root file, cached (offline: no TUF refresh)."""
        if self._verifier is None:
            from sigstore.errors import Error
            from sigstore.models import TrustedRoot
            from sigstore.verify import Verifier

            try:
                self._verifier = Verifier(trusted_root=TrustedRoot.from_file(str(self.trusted_root)))
            except Error as exc:
                raise Refused("bad-policy", f"the pinned trusted root {self.trusted_root} cannot be used: "
                              f"{_first_line(exc)}") from None
            except Exception as exc:  # malformed JSON, wrong shape: the root's own parser raises many kinds
                raise Refused("bad-policy", f"the pinned trusted root {self.trusted_root} cannot be used: "
                              f"{type(exc).__name__}: {_first_line(exc)}") from None
        return self._verifier


@functools.lru_cache(maxsize=None)
def _policy_validator():
    from jsonschema import Draft202012Validator

    import schemas

    return Draft202012Validator(schemas.load(POLICY_SCHEMA))


def _schema_diagnostics(doc: Document) -> list[Diagnostic]:
    import schemas

    from .schema import _Mapper, _rank  # the definitions' error mapping, given another schema

    mapper = _Mapper(doc, schemas.load(POLICY_SCHEMA))
    found = [d for error in _policy_validator().iter_errors(doc.data) for d in mapper.map(error)]
    return [dataclasses.replace(d, message="policy: " + d.message[len("workflow: "):])
            if d.message.startswith("workflow: ") else d for d in _rank(found)]


def _parse_expiry(text: str) -> dt.datetime:
    """``2026-12-31`` -> the first instant after that day (UTC); a timestamp as written."""
    if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
        day = dt.date.fromisoformat(text)
        return dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=dt.timezone.utc)
    value = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T"))
    if value.tzinfo is None:
        raise ValueError("a timestamp needs a zone (Z or +01:00)")
    return value


def load_policy(path: str | Path) -> TrustPolicy:
    """Load and check a trust policy; raise :class:`PolicyError` with every located problem."""
    try:
        doc = load_file(path)
    except DefinitionError as exc:
        raise PolicyError(exc.diagnostics) from None
    diags = _schema_diagnostics(doc)
    if diags:
        raise PolicyError(diags)
    data: dict = doc.data
    base = Path(path).parent
    diags = []

    def err(code: str, message: str, pointer: tuple, hint: str | None = None, key: bool = False) -> None:
        diags.append(Diagnostic(code, message, doc.locate(pointer, key=key), hint=hint,
                                pointer="/".join(map(str, pointer))))

    if not data.get("sigstore") and not data.get("keys"):
        err("T707", "the policy names no signer: nothing could ever verify", (),
            "add sigstore: {trusted_root, identities} for CI signing, or keys: [...] for offline keys")

    policy = TrustPolicy(str(path))
    sig = data.get("sigstore")
    if sig:
        root = base / sig["trusted_root"]
        if not root.is_file():
            err("T701", f"trusted root {sig['trusted_root']!r} not found (looked for {root})",
                ("sigstore", "trusted_root"), "paths are relative to the policy file; copy the root with the "
                "policy (e.g. trust/trusted_root.json) and refresh it in CI, never at run time")
        policy.trusted_root = root
        identities = []
        for i, ident in enumerate(sig["identities"]):
            has_repo = "repository" in ident or "ref" in ident
            if "identity" in ident and has_repo:
                err("T705", "give either identity, or repository and ref, not both", ("sigstore", "identities", i),
                    "identity is for non-GitHub signers (e.g. an email); repository/ref for GitHub Actions")
            elif "identity" not in ident and not ("repository" in ident and "ref" in ident):
                missing = "ref" if "repository" in ident else "repository"
                err("T705", f"a GitHub identity needs repository and ref ({missing} is missing)" if has_repo
                    else "an identity needs identity (e.g. an email), or repository and ref",
                    ("sigstore", "identities", i),
                    "add repository: owner/name and ref: refs/heads/main" if has_repo
                    else "add identity: <certificate identity>, or repository and ref")
            elif "workflow" in ident and "identity" in ident:
                err("T705", "workflow goes with repository and ref, not with identity",
                    ("sigstore", "identities", i, "workflow"), key=True)
            identities.append(Identity(**{k: ident.get(k) for k in
                                          ("issuer", "identity", "repository", "ref", "workflow")}))
        policy.identities = tuple(identities)

    keys: list[Key] = []
    seen: dict[str, int] = {}
    for i, k in enumerate(data.get("keys") or []):
        kp = ("keys", i)
        if k["id"] == SIGSTORE:
            err("T703", "a key cannot be named 'sigstore' (that name means every Sigstore identity)", kp + ("id",))
        elif k["id"] in seen:
            err("T703", f"duplicate key id {k['id']!r} (first at keys[{seen[k['id']]}])", kp + ("id",),
                "give every key its own id")
        seen.setdefault(k["id"], i)
        expires = None
        if "expires" in k:
            try:
                expires = _parse_expiry(k["expires"])
            except ValueError as exc:
                err("T706", f"expires {k['expires']!r} is not a valid date: {exc}", kp + ("expires",),
                    "write a date like 2026-12-31 or a timestamp like 2026-12-31T18:00:00Z")
        file = base / k["public_key"]
        try:
            pem = file.read_bytes()
        except OSError as exc:
            err("T701", f"public key {k['public_key']!r} cannot be read ({exc.strerror or exc}; looked for {file})",
                kp + ("public_key",), "paths are relative to the policy file; sealflow keygen writes PREFIX.pub.pem")
            continue
        try:
            public = signing.load_public_key(pem, k["public_key"])
        except signing.SigningError as exc:
            err("T702", str(exc), kp + ("public_key",), "point at the PREFIX.pub.pem that sealflow keygen wrote")
            continue
        keys.append(Key(k["id"], public, signing.key_id(public), str(file), expires, k.get("expires")))
    policy.keys = tuple(keys)

    namespaces = data.get("namespaces")
    if namespaces is not None:
        known = set(seen) | ({SIGSTORE} if sig else set())
        for ns, signers in namespaces.items():
            for j, signer in enumerate(signers):
                if signer not in known:
                    choices = ", ".join(sorted(known)) or "none: define sigstore or keys"
                    err("T704", f"namespace {ns!r} names signer {signer!r}, which the policy does not define",
                        ("namespaces", ns, j), f"use a key id from keys, or 'sigstore' (defined: {choices})")
        policy.namespaces = {ns: tuple(signers) for ns, signers in namespaces.items()}
    if diags:
        raise PolicyError(diags)
    return policy


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

    def who(self) -> str:
        d = self.details
        if self.method == "key":
            text = f"key {self.signer} (sha256 {d['fingerprint'][:16]}...)"
            return text + (f", expires {d['expires']}" if d.get("expires") else "")
        parts = [f"issuer {d.get('issuer', '?')}"]
        parts += [f"{k} {d[k]}" for k in ("repository", "ref") if d.get(k)]
        return f"{d.get('identity', '?')} ({', '.join(parts)})"

    def as_dict(self) -> dict:
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
        raise Refused("malformed-bundle", f"the signature file is not JSON ({_first_line(exc)})") from None
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
                now: dt.datetime | None = None, actions: dict | None = None) -> Verified:
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
                 now: dt.datetime | None = None, signature_file: str = "", actions: dict | None = None) -> Verified:
    """Verify ``data`` with ``signature`` (a DSSE envelope or a Sigstore bundle), then check the definition."""
    kind = bundle_kind(signature)
    if kind == "dsse":
        signers, method, details = verify_envelope(data, signature, policy, now=now), "key", None
    else:
        signers, method, details = [SIGSTORE], "sigstore", verify_sigstore(data, signature, policy)
    return _check_definition(data, path, policy, signers, method, details, signature_file, actions)


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
    now = now or dt.datetime.now(dt.timezone.utc)
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


def _bundle_json(raw: bytes) -> dict:
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
        raise Refused("malformed-bundle", f"malformed Sigstore bundle: {_first_line(exc)}") from None
    except Exception as exc:
        raise Refused("malformed-bundle", f"malformed Sigstore bundle: {type(exc).__name__}: "
                      f"{_first_line(exc)}") from None
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
                      f"{_first_line(exc)}") from None
    if "dsseEnvelope" in raw:
        if payload_type != signing.PAYLOAD_TYPE:
            raise Refused("wrong-payload-type", f"the bundle's envelope holds {payload_type!r}, not a Sealflow "
                          f"definition ({signing.PAYLOAD_TYPE})")
        if payload != data:
            raise Refused("tampered", "the file's bytes differ from the payload signed in the bundle")
    return _claims(bundle.signing_certificate)


def _classify(exc: Exception, data: bytes, bundle, raw: dict, policy: TrustPolicy) -> Refused:
    """Name the reason a Sigstore verification failed, whatever order sigstore checked in."""
    message = _first_line(exc)
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


def _claims(cert) -> dict[str, str]:
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
            out[key] = ext.value.value.decode("utf-8", "replace")
        except (x509.ExtensionNotFound, AttributeError):
            pass
    return out


def _check_definition(data: bytes, path: str, policy: TrustPolicy, signers: list, method: str,
                      details: dict | None, signature_file: str, actions: dict | None = None) -> Verified:
    """After the signature: the same bytes compile, and a signer is allowed for their namespace."""
    from .api import check_bytes

    result = check_bytes(data, path, actions=actions)
    if result.plan is None or result.errors:
        first = (result.errors or result.diagnostics)[0].format().splitlines()[0]
        raise Refused("invalid-definition", f"signed, but not a valid definition: {first}",
                      "run sealflow validate on it")
    plan = result.plan
    namespace = namespace_of(plan.owner)
    allowed = policy.allowed_signers(namespace)
    names = [s if isinstance(s, str) else s.id for s in signers]
    chosen = next((s for s, n in zip(signers, names) if allowed is None or n in allowed), None)
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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


__all__ = [
    "POLICY_CODES", "REASONS", "PolicyError", "Refused", "Identity", "Key", "TrustPolicy", "Verified",
    "load_policy", "verify_file", "verify_bytes", "verify_envelope", "verify_sigstore", "namespace_of",
    "signature_files", "bundle_kind", "SIGSTORE", "DSSE_SUFFIX", "SIGSTORE_SUFFIX",
]
