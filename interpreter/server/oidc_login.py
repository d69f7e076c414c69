"""The OIDC login flow of the ``/ui`` pages: authorization code with PKCE, state and nonce.

1. ``GET /ui/oidc/login`` (:meth:`LoginFlow.begin`): a fresh ``state`` (also set in a short-lived HttpOnly
   cookie, binding the flow to this browser), ``nonce`` and PKCE ``code_verifier`` are kept in the store
   for 10 minutes (keyed by the state's SHA-256: the callback may reach any server process on that store);
   the browser goes to the issuer's authorization endpoint with ``response_type=code``, ``code_challenge``
   (S256), the state and the nonce.
2. ``GET /ui/oidc/callback?code&state`` (:meth:`LoginFlow.finish`): the state must match the cookie and a
   pending flow (spent as it is read, in one store transaction: a replayed callback is refused by every
   process); the code is exchanged at the token endpoint with the ``code_verifier`` (and the client
   secret, when one is configured); the ID token is verified by the same :class:`~.oidc.OidcVerifier` as
   bearer JWTs (pinned JWKS, algorithm allow-list, issuer, expiry) with the client id as audience (and
   ``azp`` when it names several), and its ``nonce`` must be this flow's. The principal and tenant come
   from its claims as for a bearer JWT.

The endpoints are given explicitly or read from the issuer's discovery document
(``{issuer}/.well-known/openid-configuration``, whose ``issuer`` must be the configured one) when the
server starts. Nothing else is fetched: keys come only from the pinned JWKS file.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import logging
import secrets
import urllib.parse
from typing import TYPE_CHECKING, Any

from sealflow.operations import outbound
from sealflow.server.oidc import OidcConfigError, OidcSettings, OidcVerifier
from sealflow.server.tokens import TokenRejected
from sealflow.store.serverstate import ServerStore

if TYPE_CHECKING:
    from sealflow.execution.secrets import SecretChain

log = logging.getLogger("sealflow.server")

#: seconds a started login may take to come back
PENDING_FOR = 600.0
STATE_COOKIE = "sealflow_oidc"


@dataclasses.dataclass(frozen=True)
class OidcLoginSettings:
    client_id: str
    #: where the issuer sends the browser back: this server's ``/ui/oidc/callback``, as registered there
    redirect_uri: str
    #: the NAME of the client secret (resolved from the secret providers), for a confidential client
    client_secret: str | None = None
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    scopes: tuple[str, ...] = ("openid",)
    timeout: float = 10.0


class LoginRefused(Exception):
    """The login cannot complete; ``reason`` is short and stable (it is audited)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _state_hash(state: str) -> str:
    return "sha256:" + hashlib.sha256(state.encode()).hexdigest()


def _http_url(value: Any, what: str) -> str:
    if not isinstance(value, str) or outbound.url_problem(value) is not None:
        raise OidcConfigError(f"OIDC {what}: must be an absolute http:// or https:// URL, not {value!r}")
    return value


def discover(issuer: str, timeout: float) -> dict[str, Any]:
    """The issuer's discovery document; :class:`OidcConfigError` saying why it cannot be used."""
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        status, body = outbound.request("GET", url, timeout=timeout, read_at_most=256 * 1024)
        doc = json.loads(body) if status == 200 else None
    except (outbound.OutboundError, ValueError) as exc:
        raise OidcConfigError(f"OIDC discovery document {url}: cannot be read ({exc})") from None
    if not isinstance(doc, dict):
        raise OidcConfigError(f"OIDC discovery document {url}: HTTP {status}, not a JSON document")
    if doc.get("issuer") != issuer:
        raise OidcConfigError(f"OIDC discovery document {url} names issuer {doc.get('issuer')!r}, not {issuer!r}")
    methods = doc.get("code_challenge_methods_supported")
    if isinstance(methods, list) and "S256" not in methods:
        raise OidcConfigError(f"OIDC issuer {issuer} does not support PKCE with S256 (code_challenge_methods)")
    return doc


class LoginFlow:
    """Starts and finishes logins against one issuer (see the module docstring)."""

    def __init__(self, oidc: OidcSettings, login: OidcLoginSettings, *, secrets_chain: SecretChain | None = None):
        self.login = login
        self.issuer = oidc.issuer
        # the ID token's audience is this client: the bearer JWT verifier, with the client id as audience
        self.verifier = OidcVerifier(dataclasses.replace(oidc, audience=login.client_id))
        _http_url(login.redirect_uri, "redirect URI")
        auth, token = login.authorization_endpoint, login.token_endpoint
        if auth is None or token is None:
            doc = discover(oidc.issuer, login.timeout)
            auth, token = auth or doc.get("authorization_endpoint"), token or doc.get("token_endpoint")
        self.authorization_endpoint = _http_url(auth, "authorization endpoint")
        self.token_endpoint = _http_url(token, "token endpoint")
        #: where the client secret is resolved (set by the app from the runtime configuration)
        self.secrets = secrets_chain
        #: where started logins are kept, and the clock they expire on (set by the app: the runtime's)
        self.store: ServerStore | None = None
        self.clock: Any = None

    def bind(self, store: ServerStore, clock: Any, secrets_chain: SecretChain | None) -> None:
        self.store, self.clock, self.secrets = store, clock, secrets_chain

    def _logins(self) -> ServerStore:
        """Where started logins are kept; the app binds it before serving (a login unbound is a wiring bug)."""
        if self.store is None:
            raise RuntimeError("the OIDC login flow is not bound to the server's store (OidcLogin.bind)")
        return self.store

    # -- 1. to the issuer ----------------------------------------------------------------------------
    def begin(self) -> tuple[str, str]:
        """``(state, the authorization URL)`` of a new login."""
        state, nonce, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(32), secrets.token_urlsafe(48)
        now = self.clock.now()
        self._logins().oidc_login_put(_state_hash(state), nonce, verifier, now, now + PENDING_FOR)
        query = urllib.parse.urlencode({
            "response_type": "code", "client_id": self.login.client_id, "redirect_uri": self.login.redirect_uri,
            "scope": " ".join(self.login.scopes), "state": state, "nonce": nonce,
            "code_challenge": _b64url(hashlib.sha256(verifier.encode()).digest()), "code_challenge_method": "S256"})
        sep = "&" if "?" in self.authorization_endpoint else "?"
        return state, f"{self.authorization_endpoint}{sep}{query}"

    # -- 2. back from the issuer ---------------------------------------------------------------------
    def finish(self, state: str | None, cookie_state: str | None, code: str | None) -> tuple[str, str, dict[str, Any]]:
        """``(principal, tenant, ID token claims)`` of a completed login, else :class:`LoginRefused`."""
        if not state or not cookie_state or not hmac.compare_digest(state.encode(), cookie_state.encode()):
            raise LoginRefused("wrong-state", "the login's state does not match this browser's (start the sign-in "
                                              "again from this browser)")
        pending = self._logins().oidc_login_spend(_state_hash(state), self.clock.now()) if len(state) <= 128 else None
        if pending is None:
            raise LoginRefused("unknown-state", "this login is unknown, already used or older than 10 minutes "
                                                "(start the sign-in again)")
        if not code:
            raise LoginRefused("missing-code", "the issuer sent no authorization code")
        nonce_sent, verifier = pending
        id_token = self._exchange(code, verifier)
        try:
            principal, tenant, claims = self.verifier.verify(id_token)
        except TokenRejected as exc:
            raise LoginRefused(exc.reason, f"the ID token is refused: {exc}") from None
        audiences = aud if isinstance(aud := claims.get("aud"), list) else [aud]
        if (len(audiences) > 1 or "azp" in claims) and claims.get("azp") != self.login.client_id:
            raise LoginRefused("wrong-azp", "the ID token was not issued to this client (azp)")
        nonce = claims.get("nonce")
        if not isinstance(nonce, str) or not hmac.compare_digest(nonce.encode(), nonce_sent.encode()):
            raise LoginRefused("wrong-nonce", "the ID token's nonce is not this login's (a replayed or injected "
                                              "token is refused)")
        return principal, tenant, claims

    def _exchange(self, code: str, verifier: str) -> str:
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": self.login.redirect_uri,
                "client_id": self.login.client_id, "code_verifier": verifier}
        headers = {"content-type": "application/x-www-form-urlencoded", "accept": "application/json"}
        if self.login.client_secret:
            secret = self._client_secret()
            pair = f"{urllib.parse.quote(self.login.client_id, safe='')}:{urllib.parse.quote(secret, safe='')}"
            headers["authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        try:
            status, body = outbound.request("POST", self.token_endpoint, body=urllib.parse.urlencode(form).encode(),
                                            headers=headers, timeout=self.login.timeout, read_at_most=256 * 1024)
            answer = json.loads(body)
        except outbound.OutboundError as exc:  # its words name an exception class: for the log, not the page
            log.warning("OIDC login: the issuer's token endpoint cannot be reached: %s", exc)
            raise LoginRefused("token-endpoint", "the issuer's token endpoint cannot be reached (the server's log "
                                                 "says why)") from None
        except ValueError:
            raise LoginRefused("token-endpoint", "the issuer's token endpoint did not answer JSON") from None
        if status != 200 or not isinstance(answer, dict):
            error = answer.get("error") if isinstance(answer, dict) else None
            raise LoginRefused("code-refused", f"the issuer refused the authorization code (HTTP {status}"
                                               + (f", {str(error)[:80]}" if error else "") + ")")
        id_token = answer.get("id_token")
        if not isinstance(id_token, str) or not id_token:
            raise LoginRefused("no-id-token", "the issuer's answer has no ID token (is the openid scope allowed?)")
        return id_token

    def _client_secret(self) -> str:
        name = self.login.client_secret or ""
        try:
            if self.secrets is None:
                from sealflow.execution.secrets import chain_for

                self.secrets = chain_for(None)
            return self.secrets.resolve([name])[name]
        except Exception:  # noqa: BLE001 - which provider failed is the operator's to see
            raise LoginRefused("client-secret", f"the OIDC client secret {name} is not available") from None
