"""OIDC JWTs, verified offline against a configured issuer and a pinned JWKS file.

A token is accepted only if its signature verifies with a key of the pinned JWKS (chosen by ``kid``), its
algorithm is on the allow-list (asymmetric algorithms only: a public key never verifies an HMAC), and its
``iss``, ``aud``, ``exp`` (and ``nbf``/``iat`` when present) hold within ``leeway`` seconds of clock skew.
The principal is ``principal_prefix`` + the ``principal_claim`` (``sub`` by default: ``user:<sub>``); the
tenant is the ``tenant_claim``, else the configured default tenant. Nothing is fetched from the network.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jwt

from sealflow.interpreter.policy.access import InvalidPrincipal, check_principal
from sealflow.interpreter.service.server.tokens import TokenRejected

#: the algorithms a JWKS of public keys can verify; HS* (shared secrets) are never accepted
ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


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

    def _key(self, token: str) -> Any:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise TokenRejected("malformed", "the bearer token is neither an API token nor a JWT") from None
        kid = header.get("kid")
        key = self._keys.get(kid) if kid is not None else (next(iter(self._keys.values()))
                                                           if len(self._keys) == 1 else None)
        if key is None:
            raise TokenRejected("unknown-key", f"the JWT's key id {kid!r} is not in the pinned JWKS")
        if header.get("alg") not in self.settings.algorithms:
            raise TokenRejected("algorithm-not-allowed", f"the JWT's algorithm {header.get('alg')!r} is not allowed")
        return key

    def verify(self, token: str) -> tuple[str, str, dict]:
        """``(principal, tenant, claims)`` of a valid token, else :class:`TokenRejected`."""
        s = self.settings
        key = self._key(token)
        try:
            claims = jwt.decode(token, key.key, algorithms=list(s.algorithms), audience=s.audience, issuer=s.issuer,
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
            raise TokenRejected("missing-claim", f"the JWT has no {exc.claim!r} claim") from None
        except jwt.ImmatureSignatureError:
            raise TokenRejected("not-yet-valid", "the JWT is not valid yet") from None
        except jwt.InvalidAlgorithmError:
            raise TokenRejected("algorithm-not-allowed", "the JWT's algorithm is not allowed") from None
        except jwt.PyJWTError as exc:
            raise TokenRejected("invalid-jwt", f"the JWT is not valid: {exc}") from None
        subject = claims.get(s.principal_claim)
        try:
            principal = check_principal(f"{s.principal_prefix}{subject}")
        except InvalidPrincipal:
            raise TokenRejected("bad-principal", f"the JWT's {s.principal_claim!r} claim does not name a principal"
                                ) from None
        tenant = claims.get(s.tenant_claim, s.default_tenant)
        if not isinstance(tenant, str) or not tenant:
            raise TokenRejected("missing-claim", f"the JWT has no {s.tenant_claim!r} claim naming a tenant")
        return principal, tenant, claims
