"""What a server is started with (``sealflow serve``'s options), passable to worker processes as JSON."""

from __future__ import annotations

import dataclasses
import json
import os

from sealflow.server.oidc import OidcSettings
from sealflow.server.oidc_login import OidcLoginSettings

#: the environment variable uvicorn's worker processes read their settings from
ENV = "SEALFLOW_SERVER_SETTINGS"


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    store_url: str | None = None
    config_path: str | None = None
    access_path: str | None = None
    trust_path: str | None = None
    actions: tuple[str, ...] = ()
    #: serve anonymous requests and run without an access policy (development only; announced)
    allow_open: bool = False
    oidc: OidcSettings | None = None
    #: the /ui pages' OIDC login flow (needs ``oidc``: its issuer and pinned JWKS verify the ID tokens)
    oidc_login: OidcLoginSettings | None = None
    #: requests a second per principal (0: no limit) and the burst allowed
    rate: float = 20.0
    burst: float | None = None
    #: the largest request body accepted, in bytes
    max_body: int = 1 << 20
    #: run the runtime's worker, dispatcher and sweeper in this process (the embedded deployment)
    work: bool = True
    #: serve the /ui pages (approvals, runs) for people signing in with an API token
    ui: bool = True

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServerSettings:
        raw = json.loads(text)
        raw["actions"] = tuple(raw.get("actions") or ())
        oidc = raw.get("oidc")
        if oidc is not None:
            oidc["algorithms"] = tuple(oidc["algorithms"])
            raw["oidc"] = OidcSettings(**oidc)
        login = raw.get("oidc_login")
        if login is not None:
            login["scopes"] = tuple(login["scopes"])
            raw["oidc_login"] = OidcLoginSettings(**login)
        return cls(**raw)

    @classmethod
    def from_env(cls) -> ServerSettings:
        text = os.environ.get(ENV)
        return cls.from_json(text) if text else cls()
