"""The trust policy: who may sign which definitions (``docs/trust.md``).

A policy (YAML, ``schemas/trust-policy.schema.json``) names Sigstore identities checked against a
pinned trusted root, offline Ed25519 keys (with optional expiry), and optionally which of them may
sign for which namespace. :func:`load_policy` validates it with located errors, like definitions.
Verification against a policy lives in :mod:`sealflow.dsl.trust.verify`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sealflow.dsl.document import Pointer
from sealflow.dsl.errors import DefinitionError, Diagnostic, DslError
from sealflow.dsl.loader import Document, load_file
from sealflow.dsl.trust import signing

if TYPE_CHECKING:  # sigstore is optional at run time (the sigstore extra)
    from jsonschema import Draft202012Validator
    from sigstore.verify import Verifier
    from sigstore.verify.policy import VerificationPolicy

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
    "untrusted-child": "a workflow it calls is not signed, or not trusted under the same policy",
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

    def sigstore_policy(self) -> VerificationPolicy:
        from sigstore.verify import policy as sp

        # The policy loader refuses a repository without a ref and an identity with neither (T705).
        if self.repository:
            if self.ref is None:
                raise Refused("bad-policy", f"the Sigstore identity {self.describe()} has no ref")
            checks: list[VerificationPolicy] = [
                sp.OIDCIssuer(self.issuer), sp.GitHubWorkflowRepository(self.repository),
                sp.GitHubWorkflowRef(self.ref)]
            san = self.san
            if self.workflow and san is not None:  # a workflow always gives a SAN
                checks.append(sp.Identity(identity=san, issuer=self.issuer))
            return sp.AllOf(checks)
        if self.identity is None:
            raise Refused("bad-policy", f"the Sigstore identity {self.describe()} names no identity")
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

    def sigstore_verifier(self) -> Verifier:
        """A Sigstore verifier built from the pinned root file, cached (offline: no TUF refresh)."""
        if self._verifier is None:
            from sigstore.errors import Error
            from sigstore.models import TrustedRoot
            from sigstore.verify import Verifier

            try:
                self._verifier = Verifier(trusted_root=TrustedRoot.from_file(str(self.trusted_root)))
            except Error as exc:
                raise Refused("bad-policy", f"the pinned trusted root {self.trusted_root} cannot be used: "
                              f"{first_line(exc)}") from None
            except Exception as exc:  # malformed JSON, wrong shape: the root's own parser raises many kinds
                raise Refused("bad-policy", f"the pinned trusted root {self.trusted_root} cannot be used: "
                              f"{type(exc).__name__}: {first_line(exc)}") from None
        verifier: Verifier = self._verifier
        return verifier


@functools.cache
def _policy_validator() -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    from sealflow import schemas

    return Draft202012Validator(schemas.load(POLICY_SCHEMA))


def _schema_diagnostics(doc: Document) -> list[Diagnostic]:
    from sealflow import schemas
    from sealflow.dsl.schema_errors import SchemaErrorMapper

    mapper = SchemaErrorMapper(doc, schemas.load(POLICY_SCHEMA), subject="policy")
    return mapper.diagnostics(_policy_validator().iter_errors(doc.data))


def _parse_expiry(text: str) -> dt.datetime:
    """``2026-12-31`` -> the first instant after that day (UTC); a timestamp as written."""
    if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
        day = dt.date.fromisoformat(text)
        return dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
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
    data: dict[str, Any] = doc.data
    base = Path(path).parent
    diags = []

    def err(code: str, message: str, pointer: Pointer, hint: str | None = None, key: bool = False) -> None:
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


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (at most 300 characters), or its class name."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
