"""OIDC JWTs, verified offline against a configured issuer and a pinned JWKS file.

A token is accepted only if its signature verifies with a key of the pinned JWKS (chosen by ``kid``), its
algorithm is on the allow-list (asymmetric algorithms only: a public key never verifies an HMAC) and fits
that key (:func:`fitting`: RS*/PS* for an RSA key, the ES* of its curve for an EC key, EdDSA for an OKP key;
only the JWK's own ``alg`` when it declares one), and its ``iss``, ``aud``, ``exp`` (and ``nbf``/``iat`` when
present) hold within ``leeway`` seconds of clock skew. The principal is ``principal_prefix`` + the
``principal_claim`` (``sub`` by default: ``user:<sub>``); the tenant is the ``tenant_claim``, else the
configured default tenant. Nothing is fetched from the network.

Whatever a token holds, :meth:`OidcVerifier.verify` answers with the claims or :class:`TokenRejected` (a
stable reason, a message in our words): a header that is not one, an algorithm that does not fit the key, or
anything the JWT library raises is a refusal, never an exception of the library's reaching the caller (the
API answers 401, never 500, and never quotes the library: no class name, no repr).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import jwt

from sealflow.policy.access import InvalidPrincipal, check_principal
from sealflow.server.tokens import TokenRejected

log = logging.getLogger("sealflow.server")

#: the algorithms a JWKS of public keys can verify; HS* (shared secrets) are never accepted
ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
_EC_CURVES = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}


def fitting(jwk: dict[str, Any]) -> frozenset[str]:
    """The algorithms a JWK's key can verify: its declared ``alg`` when it has one (if that is asymmetric),
    else those of its key type (and curve). Empty: none (a shared secret, an unknown type or curve)."""
    kty, crv, declared = jwk.get("kty"), jwk.get("crv"), jwk.get("alg")
    if kty == "RSA":
        fits = {a for a in ASYMMETRIC if a[:2] in ("RS", "PS")}
    elif kty == "EC":
        fits = {_EC_CURVES[crv]} if isinstance(crv, str) and crv in _EC_CURVES else set()
    elif kty == "OKP":
        fits = {"EdDSA"} if crv in ("Ed25519", "Ed448") else set()
    else:
        fits = set()
    if declared is not None:
        fits &= {declared} if isinstance(declared, str) else set()
    return frozenset(fits)


def _quoted(value: Any) -> str:
    """A header value as the caller sent it, for a message: a short string quoted, anything else named by its
    JSON type (never a Python repr)."""
    if isinstance(value, str):
        return json.dumps(value[:64] + ("..." if len(value) > 64 else ""))
    if value is None:
        return "(none)"
    return {bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "an object"}.get(
        type(value), "not a string")


class OidcConfigError(ValueError):
    """The OIDC settings or the JWKS file cannot be used."""


@dataclasses.dataclass(frozen=True)
class OidcSettings:
    issuer: str
    audience: str
    jwks_path: str
    algorithms: tuple[str, ...] = ("RS256", "ES256", "EdDSA")
    leeway: float = 60.0
    principal_claim: str = "sub"
    principal_prefix: str = "user:"
    tenant_claim: str = "tenant"
    default_tenant: str | None = None


class OidcVerifier:
    """Verifies bearer JWTs per :class:`OidcSettings` (keys loaded once, at start)."""

    def __init__(self, settings: OidcSettings):
        bad = [a for a in settings.algorithms if a not in ASYMMETRIC]
        if bad or not settings.algorithms:
            raise OidcConfigError(f"OIDC algorithms {bad or '(none)'} are not allowed; use asymmetric ones: "
                                  f"{', '.join(ASYMMETRIC)}")
        self.settings = settings
        try:
            raw = json.loads(Path(settings.jwks_path).read_text(encoding="utf-8"))
            jwks = jwt.PyJWKSet.from_dict(raw)
        except OSError as exc:
            raise OidcConfigError(f"OIDC JWKS {settings.jwks_path}: cannot read: {exc.strerror or exc}") from None
        except (ValueError, jwt.PyJWKSetError, jwt.PyJWKError) as exc:
            raise OidcConfigError(f"OIDC JWKS {settings.jwks_path} is not a usable JWK set: {exc}") from None
        self._keys = {k.key_id: k for k in jwks.keys}
        #: kid -> the algorithms its key can verify (:func:`fitting`)
        self._fits = {k.key_id: fitting(k._jwk_data) for k in jwks.keys}

    def _key(self, token: str) -> tuple[Any, str]:
        """The pinned key a token names and the algorithm its header names (on the allow-list, fitting the key),
        else :class:`TokenRejected`."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:  # not base64 or JSON, not an object, a kid that is not a string, an unknown crit
            raise TokenRejected("malformed", "the bearer token is neither an API token nor a well-formed JWT "
                                             "(its header must be a JSON object with a string kid and alg)") from None
        kid, alg = header.get("kid"), header.get("alg")
        if alg is None:
            raise TokenRejected("algorithm-not-allowed", "the JWT's header names no algorithm (alg)")
        if not isinstance(alg, str) or alg not in self.settings.algorithms:
            allowed = ", ".join(self.settings.algorithms)
            raise TokenRejected("algorithm-not-allowed", f"the JWT's algorithm {_quoted(alg)} is not allowed here "
                                                         f"(allowed: {allowed})")
        key = self._keys.get(kid) if kid is not None else (next(iter(self._keys.values()))
                                                           if len(self._keys) == 1 else None)
        if key is None:
            raise TokenRejected("unknown-key", f"the JWT's key id {_quoted(kid)} is not in the pinned JWKS")
        if alg not in self._fits.get(key.key_id, frozenset()):
            raise TokenRejected("algorithm-key-mismatch", f"the JWT's algorithm {_quoted(alg)} does not fit the "
                                                          "pinned key it names")
        return key, alg

    def verify(self, token: str) -> tuple[str, str, dict[str, Any]]:
        """``(principal, tenant, claims)`` of a valid token, else :class:`TokenRejected` (never another
        exception: see the module docstring)."""
        try:
            return self._verify(token)
        except TokenRejected:
            raise
        except Exception as exc:  # noqa: BLE001 - a token must not reach a library path that raises: a 401 still
            log.warning("OIDC: a JWT was refused on an unexpected error of the JWT library (%s)", type(exc).__name__)
            raise TokenRejected("invalid-jwt", "the JWT cannot be verified") from None

    def _verify(self, token: str) -> tuple[str, str, dict[str, Any]]:
        s = self.settings
        key, alg = self._key(token)
        try:
            claims = jwt.decode(token, key.key, algorithms=[alg], audience=s.audience, issuer=s.issuer,
                                leeway=s.leeway, options={"require": ["exp", "iss", "aud", s.principal_claim]})
        except jwt.ExpiredSignatureError:
            raise TokenRejected("expired", "the JWT has expired") from None
        except jwt.InvalidAudienceError:
            raise TokenRejected("wrong-audience", f"the JWT is not for audience {s.audience!r}") from None
        except jwt.InvalidIssuerError:
            raise TokenRejected("wrong-issuer", f"the JWT was not issued by {s.issuer!r}") from None
        except jwt.InvalidSignatureError:
            raise TokenRejected("bad-signature", "the JWT's signature does not verify") from None
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRejected("missing-claim", f"the JWT has no {_quoted(exc.claim)} claim") from None
        except jwt.ImmatureSignatureError:
            raise TokenRejected("not-yet-valid", "the JWT is not valid yet") from None
        except jwt.InvalidAlgorithmError:
            raise TokenRejected("algorithm-not-allowed", "the JWT's algorithm is not allowed") from None
        except jwt.PyJWTError:  # the library's words may quote its internals: ours instead
            raise TokenRejected("invalid-jwt", "the JWT is not valid: its body must be a JSON object whose exp, nbf "
                                               "and iat are numbers and whose iss and sub are strings") from None
        subject = claims.get(s.principal_claim)
        try:
            if not isinstance(subject, str):
                raise InvalidPrincipal("not a string")
            principal = check_principal(f"{s.principal_prefix}{subject}")
        except InvalidPrincipal:
            raise TokenRejected("bad-principal", f"the JWT's {_quoted(s.principal_claim)} claim does not name a "
                                                 "principal") from None
        tenant = claims.get(s.tenant_claim, s.default_tenant)
        if not isinstance(tenant, str) or not tenant:
            raise TokenRejected("missing-claim", f"the JWT has no {_quoted(s.tenant_claim)} claim naming a tenant")
        return principal, tenant, claims
