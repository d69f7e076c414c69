"""A small real OIDC provider on loopback for the login-flow tests (``http.server`` in a thread).

It serves a discovery document, an authorization endpoint that signs in ``subject`` at once (redirecting
back with a one-use code bound to the request's nonce, PKCE challenge, client and redirect URI), and a token
endpoint that checks the code, the redirect URI, the client (and its secret, when one is set, by HTTP Basic)
and the PKCE ``code_verifier`` against the S256 challenge before answering an RS256 ID token signed with
``key`` (its ``kid`` pinned by the test's JWKS file). ``overrides`` replace claims of the next ID tokens
(a wrong nonce, another audience, an expired token); ``key_for_tokens`` signs with another key, and
``algorithm_for_tokens`` with another algorithm (ES256 with an EC key: one the pinned RSA key cannot verify).
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import secrets
import time
import urllib.parse

import jwt
from webhook_receivers import LoopbackServer


class Provider(LoopbackServer):
    def __init__(self, key, *, kid="k1", client_id="sealflow-ui", client_secret=None, subject="bob", tenant="acme",
                 host="127.0.0.1"):
        #: the host name of its URLs (``localhost``: another site than ``127.0.0.1`` for a browser's cookies)
        self.host = host
        self.key, self.kid, self.client_id, self.client_secret = key, kid, client_id, client_secret
        self.subject, self.tenant = subject, tenant
        self.codes: dict[str, dict] = {}
        self.overrides: dict = {}
        self.key_for_tokens = None
        self.algorithm_for_tokens = "RS256"
        self.token_requests: list[dict] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _json(self, status, doc):
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                if url.path.endswith("/.well-known/openid-configuration"):  # any issuer path: the same issuer
                    return self._json(200, {"issuer": owner.url, "authorization_endpoint": owner.url + "/authorize",
                                            "token_endpoint": owner.url + "/token", "jwks_uri": owner.url + "/jwks",
                                            "response_types_supported": ["code"],
                                            "code_challenge_methods_supported": ["S256"]})
                if url.path != "/authorize":
                    return self._json(404, {"error": "not_found"})
                q = dict(urllib.parse.parse_qsl(url.query))
                if q.get("response_type") != "code" or q.get("client_id") != owner.client_id \
                        or q.get("code_challenge_method") != "S256":
                    return self._json(400, {"error": "invalid_request"})
                code = secrets.token_urlsafe(16)
                owner.codes[code] = {"nonce": q.get("nonce"), "challenge": q["code_challenge"],
                                     "redirect_uri": q["redirect_uri"], "scope": q.get("scope")}
                back = q["redirect_uri"] + "?" + urllib.parse.urlencode({"code": code, "state": q.get("state", "")})
                self.send_response(302)
                self.send_header("Location", back)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0)).decode()
                form = dict(urllib.parse.parse_qsl(body))
                owner.token_requests.append(form)
                grant = owner.codes.pop(form.get("code", ""), None)
                if self.path != "/token" or form.get("grant_type") != "authorization_code" or grant is None:
                    return self._json(400, {"error": "invalid_grant"})
                if form.get("redirect_uri") != grant["redirect_uri"] or form.get("client_id") != owner.client_id:
                    return self._json(400, {"error": "invalid_grant"})
                verifier = form.get("code_verifier", "")
                challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
                if challenge != grant["challenge"]:
                    return self._json(400, {"error": "invalid_grant", "error_description": "PKCE"})
                if owner.client_secret is not None:
                    expected = base64.b64encode(f"{owner.client_id}:{owner.client_secret}".encode()).decode()
                    if self.headers.get("authorization") != f"Basic {expected}":
                        return self._json(401, {"error": "invalid_client"})
                now = int(time.time())
                claims = {"iss": owner.url, "sub": owner.subject, "aud": owner.client_id, "iat": now,
                          "exp": now + 300, "nonce": grant["nonce"], "tenant": owner.tenant, **owner.overrides}
                token = jwt.encode(claims, owner.key_for_tokens or owner.key, algorithm=owner.algorithm_for_tokens,
                                   headers={"kid": owner.kid})
                return self._json(200, {"access_token": "opaque", "token_type": "Bearer", "id_token": token})

        self.serve(Handler)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.server_address[1]}"
