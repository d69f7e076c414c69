"""``sealflow serve``: the HTTP API (docs/operations.md), on uvicorn.

    sealflow serve --store sqlite:////srv/sealflow/state.db --access access.yaml --trust trust.yaml \\
        --actions myco.actions --oidc-issuer https://id.example.com --oidc-audience sealflow \\
        --oidc-jwks /etc/sealflow/jwks.json --port 8300

Everything is checked before it listens: the access policy (required unless ``--allow-open``), the trust
policy, the OIDC settings and JWKS file, the action modules. Without ``--allow-open`` no request is served
without a credential (an API token from ``sealflow tokens create``, or an OIDC JWT); with it, anonymous
requests act as ``user:anonymous`` in tenant ``default`` and every response says so
(``Sealflow-Open-Mode``). By default the process also works the runs (worker, dispatcher, sweeper) as the
embedded default does; ``--no-work`` leaves that to ``sealflow worker`` processes.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

import click

from sealflow.cli.exits import fail_usage
from sealflow.cli.options import access_option, actions_option, store_option
from sealflow.cli.session import access_path as resolve_access
from sealflow.cli.session import (
    import_actions,
    load_access,
    load_config,
    project,
    project_actions,
    require_policy,
    store_location,
    trust_path,
)

if TYPE_CHECKING:
    from sealflow.server.oidc import OidcSettings
    from sealflow.server.oidc_login import OidcLoginSettings


def _config_path() -> str | None:
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    given = obj.get("config_path") if isinstance(obj, dict) else None
    found = project()
    return given or os.environ.get("SEALFLOW_CONFIG") or (found.config if found is not None else None)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8300, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Server processes (uvicorn workers), each with its own runtime; sessions, sign-ins and rate "
                   "limits are shared through the store.")
@store_option
@access_option
@click.option("--trust", metavar="POLICY", envvar="SEALFLOW_TRUST",
              help="Trust policy: submit only registered signed definitions, or signed bytes verified here. "
                   "Without it, development mode: any definition already submitted to the store, unsigned.")
@actions_option
@click.option("--allow-open", is_flag=True,
              help="DEVELOPMENT ONLY: serve requests without a credential and run without an access policy.")
@click.option("--oidc-issuer", metavar="URL",
              help="Accept OIDC JWTs issued by URL (needs --oidc-audience and --oidc-jwks).")
@click.option("--oidc-audience", metavar="AUD", help="The audience the JWTs must name.")
@click.option("--oidc-jwks", metavar="FILE", help="The issuer's JWKS, pinned in a file (nothing is fetched).")
@click.option("--oidc-algorithm", "oidc_algorithms", multiple=True, metavar="ALG",
              help="Allowed JWT algorithms (repeatable; default RS256, ES256, EdDSA; asymmetric only).")
@click.option("--oidc-leeway", default=60.0, show_default=True, type=click.FloatRange(0, 600),
              help="Clock skew allowed on exp/nbf/iat, in seconds.")
@click.option("--oidc-principal-claim", default="sub", show_default=True,
              help="The claim naming the principal (prefixed with --oidc-principal-prefix).")
@click.option("--oidc-principal-prefix", default="user:", show_default=True)
@click.option("--oidc-tenant-claim", default="tenant", show_default=True, help="The claim naming the tenant.")
@click.option("--oidc-default-tenant", metavar="NAME", help="The tenant of JWTs without the tenant claim.")
@click.option("--oidc-client-id", metavar="ID",
              help="Sign people in to /ui with the OIDC login flow as this client of --oidc-issuer (code + PKCE).")
@click.option("--oidc-client-secret", metavar="NAME",
              help="The NAME of the client's secret (from $SEALFLOW_SECRET_<NAME> or secrets.dir), if confidential.")
@click.option("--oidc-redirect-uri", metavar="URL",
              help="This server's /ui/oidc/callback as registered with the issuer (required with --oidc-client-id).")
@click.option("--oidc-authorization-endpoint", metavar="URL",
              help="The issuer's authorization endpoint (default: from its discovery document).")
@click.option("--oidc-token-endpoint", metavar="URL",
              help="The issuer's token endpoint (default: from its discovery document).")
@click.option("--oidc-scope", "oidc_scopes", multiple=True, metavar="SCOPE",
              help="A scope to ask for beyond openid (repeatable).")
@click.option("--rate-limit", default=20.0, show_default=True, type=click.FloatRange(0),
              help="Requests per second per principal, counted in the store for every server process on it "
                   "(0: no limit).")
@click.option("--rate-burst", type=click.IntRange(1), default=None,
              help="Requests a principal may make at once (default: twice --rate-limit, at least 1).")
@click.option("--max-body", default=1 << 20, show_default=True, type=click.IntRange(1024),
              help="The largest request body accepted, in bytes.")
@click.option("--work/--no-work", default=True, show_default=True,
              help="Also work the runs in this process (worker, dispatcher, sweeper).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              envvar="SEALFLOW_LOG_FORMAT",
              help="Log lines on stderr: text, or one JSON object a line with run, step, attempt and trace ids.")
def serve(host: str, port: int, workers: int, store_url: str | None, access_path: str | None, trust: str | None,
          actions: tuple[str, ...], allow_open: bool, oidc_issuer: str | None, oidc_audience: str | None,
          oidc_jwks: str | None, oidc_algorithms: tuple[str, ...], oidc_leeway: float, oidc_principal_claim: str,
          oidc_principal_prefix: str, oidc_tenant_claim: str, oidc_default_tenant: str | None,
          oidc_client_id: str | None, oidc_client_secret: str | None, oidc_redirect_uri: str | None,
          oidc_authorization_endpoint: str | None, oidc_token_endpoint: str | None, oidc_scopes: tuple[str, ...],
          rate_limit: float, rate_burst: int | None, max_body: int, work: bool, log_format: str) -> None:
    """Serve the HTTP API: runs, approvals, dead letters, definitions; OpenAPI at /openapi.json."""
    from sealflow.cli.session import load_trust_policy
    from sealflow.server.oidc import OidcConfigError, OidcSettings, OidcVerifier
    from sealflow.server.settings import ENV, ServerSettings

    trust = trust_path(trust)  # flags, then SEALFLOW_*, then sealflow.yaml
    access_path = resolve_access(access_path)
    actions = project_actions(actions)
    provider = load_access(access_path, quiet=not allow_open)  # warned only when it serves in open mode
    if not allow_open:
        require_policy(provider, "sealflow serve")
    config = load_config()
    from sealflow.core.errors import ConfigError
    from sealflow.operations import notifications
    from sealflow.server import events

    try:
        events.sources(config)  # an invalid events: section stops the server here, not at the first request
        notifications.load(config)  # so does an invalid notifications: section
    except ConfigError as exc:
        fail_usage(str(exc))
    if trust is not None:
        load_trust_policy(trust)
    import_actions(actions, demo=False)
    oidc = None
    given = [o for o in (oidc_issuer, oidc_audience, oidc_jwks) if o]
    if given:
        if not (oidc_issuer and oidc_audience and oidc_jwks):  # some given, not all three
            fail_usage("OIDC needs all of --oidc-issuer, --oidc-audience and --oidc-jwks")
        oidc = OidcSettings(issuer=oidc_issuer, audience=oidc_audience, jwks_path=os.path.abspath(oidc_jwks),
                            algorithms=tuple(oidc_algorithms) or ("RS256", "ES256", "EdDSA"), leeway=oidc_leeway,
                            principal_claim=oidc_principal_claim, principal_prefix=oidc_principal_prefix,
                            tenant_claim=oidc_tenant_claim, default_tenant=oidc_default_tenant)
        try:
            OidcVerifier(oidc)
        except OidcConfigError as exc:
            fail_usage(str(exc))
    login = _login_settings(oidc, oidc_client_id, oidc_client_secret, oidc_redirect_uri, oidc_authorization_endpoint,
                            oidc_token_endpoint, oidc_scopes)
    settings = ServerSettings(store_url=store_location(store_url), config_path=_config_path(),
                              access_path=access_path or os.environ.get("SEALFLOW_ACCESS") or None,
                              trust_path=trust, actions=tuple(actions), allow_open=allow_open, oidc=oidc,
                              oidc_login=login,
                              rate=rate_limit, burst=rate_burst, max_body=max_body, work=work)
    if allow_open:
        click.echo("sealflow: warning: OPEN MODE (--allow-open): requests without a credential are served as "
                   "user:anonymous; development only, never on a shared network", err=True)
    _check_listen(host, port)
    auth = "API tokens" + (f", OIDC JWTs from {oidc_issuer}" if oidc else "") + (", OIDC sign-in" if login else "")
    click.echo(f"sealflow serve: http://{host}:{port} ({workers} process{'es' if workers > 1 else ''}; {auth}; "
               f"{'trust policy ' + trust if trust else 'development mode: unsigned definitions'})", err=True)
    import uvicorn

    from sealflow.runtime.telemetry import logging as telemetry_logging

    if log_format == "json":  # text: unchanged (warnings and errors only)
        os.environ["SEALFLOW_LOG_FORMAT"] = log_format  # uvicorn's worker processes (app.from_env) read it
        telemetry_logging.setup(log_format)
    if workers == 1:
        from sealflow.server.app import create_app

        uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")
    else:
        os.environ[ENV] = settings.to_json()
        uvicorn.run("sealflow.server.app:from_env", factory=True, host=host, port=port,
                    workers=workers, log_level="warning")


def _check_listen(host: str, port: int) -> None:
    """Fail (exit 1) before anything starts when ``host:port`` cannot be listened on: the port is taken, the
    address is not this machine's, the host name does not resolve, a port below 1024 without the right."""
    import socket

    from sealflow.cli.exits import fail

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        fail(f"cannot listen on {host}:{port}: the host name does not resolve ({exc.strerror}); give --host an "
             "address of this machine, e.g. 127.0.0.1 or 0.0.0.0")
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            why = {errno.EADDRINUSE: "the address is already in use (another process listens there); stop it, or "
                                     "choose another --port",
                   errno.EADDRNOTAVAIL: "the address is not one of this machine's; choose another --host",
                   errno.EACCES: "permission denied (a port below 1024 needs privileges); choose another --port"}
            fail(f"cannot listen on {host}:{port}: {why.get(exc.errno or 0) or exc.strerror or exc}")


def _login_settings(oidc: OidcSettings | None, client_id: str | None, client_secret: str | None,
                    redirect_uri: str | None, authorization_endpoint: str | None, token_endpoint: str | None,
                    scopes: tuple[str, ...]) -> OidcLoginSettings | None:
    """The /ui OIDC login flow's settings (None without --oidc-client-id), checked now: its discovery document
    is read and its redirect URI and endpoints must be http(s) URLs."""
    from sealflow.server.oidc import OidcConfigError
    from sealflow.server.oidc_login import LoginFlow, OidcLoginSettings

    given = [o for o in (client_secret, redirect_uri, authorization_endpoint, token_endpoint) if o] + list(scopes)
    if client_id is None:
        if given:
            fail_usage("the OIDC login flow's options need --oidc-client-id")
        return None
    if oidc is None or not redirect_uri:
        fail_usage("the OIDC login flow (--oidc-client-id) needs --oidc-issuer, --oidc-audience, --oidc-jwks and "
                   "--oidc-redirect-uri")
    login = OidcLoginSettings(client_id=client_id, redirect_uri=redirect_uri, client_secret=client_secret,
                              authorization_endpoint=authorization_endpoint, token_endpoint=token_endpoint,
                              scopes=("openid", *[s for s in scopes if s != "openid"]))
    try:
        LoginFlow(oidc, login)
    except OidcConfigError as exc:
        fail_usage(str(exc))
    return login


def register(group: click.Group) -> None:
    group.add_command(serve)
