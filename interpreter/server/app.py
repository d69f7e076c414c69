"""The ASGI application: :func:`create_app` (an app on a runtime you hold, e.g. in tests) and
:func:`from_env` (the factory ``sealflow serve`` gives uvicorn; each worker process builds its own runtime
from :class:`~.settings.ServerSettings` in ``$SEALFLOW_SERVER_SETTINGS``).

A server started without ``--allow-open`` refuses to start without an access policy, and serves nothing
without a credential; with it, every response carries ``Sealflow-Open-Mode``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from sealflow.server import openapi, problems
from sealflow.server.auth import Authenticator
from sealflow.server.middleware import BodyLimit, OpenBanner
from sealflow.server.oidc import OidcVerifier
from sealflow.server.ratelimit import RateLimiter
from sealflow.server.routes import (
    approvals,
    callbacks,
    definitions,
    dlq,
    events,
    health,
    metrics,
    notifications,
    runs,
)
from sealflow.server.settings import ServerSettings

log = logging.getLogger("sealflow.server")
API_VERSION = "1"


class StartupError(Exception):
    """The server cannot start as configured (the message says why and what to change)."""


def import_actions(specs: tuple[str, ...]) -> None:
    """Register the ``--actions`` modules (dotted names or ``.py`` files) in this process."""
    for spec in specs:
        if spec.endswith(".py"):
            path = Path(spec)
            name = "sealflow_actions_" + "_".join(path.resolve().with_suffix("").parts[-3:]).replace("-", "_")
            if name in sys.modules:
                continue
            module_spec = importlib.util.spec_from_file_location(name, path)
            if module_spec is None or module_spec.loader is None:
                raise StartupError(f"--actions {spec}: not a Python file")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            module_spec.loader.exec_module(module)
        else:
            importlib.import_module(spec)


def open_runtime(settings: ServerSettings) -> Any:
    """The runtime a server process works on, as ``settings`` say (refusing open mode without ``allow_open``)."""
    from sealflow.policy.access import access_provider
    from sealflow.policy.authz import require_policy
    from sealflow.runtime.config import RuntimeConfig
    from sealflow.runtime.facade import Runtime

    import_actions(settings.actions)
    access = access_provider(settings.access_path)
    if not settings.allow_open:
        require_policy(access, "sealflow serve")
    logging.getLogger("sealflow.access").setLevel(logging.ERROR)  # the server announces open mode itself
    from sealflow.runtime.telemetry import tracing

    tracing.configure()  # OTLP export only when OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/operations.md "Traces")
    return Runtime(settings.store_url, access=access, config=RuntimeConfig.from_env(settings.config_path))


def load_trust(settings: ServerSettings) -> Any:
    if settings.trust_path is None:
        return None
    from sealflow.dsl.trust import load_policy

    return load_policy(settings.trust_path)


def create_app(settings: ServerSettings, runtime: Any = None, *, trust: Any = None) -> FastAPI:
    """The API on ``runtime`` (None: opened from ``settings`` at startup and closed at shutdown)."""
    oidc = OidcVerifier(settings.oidc) if settings.oidc is not None else None
    login = None
    if settings.oidc_login is not None:  # the /ui OIDC login flow: endpoints discovered now, at start
        if settings.oidc is None:
            raise StartupError("the OIDC login flow needs the OIDC issuer, audience and JWKS settings")
        from sealflow.server.oidc_login import LoginFlow

        login = LoginFlow(settings.oidc, settings.oidc_login)
    owned = runtime is None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        rt = app.state.runtime
        if rt is None:
            rt = app.state.runtime = open_runtime(settings)
            app.state.trust = load_trust(settings)
        _bind(app, settings, rt, oidc, login)
        stop = threading.Event()
        worker = None
        if owned and settings.work:
            worker = threading.Thread(target=rt.serve, args=(stop,), kwargs={"allow_open": True},
                                      name="sealflow-serve-worker", daemon=True)
            worker.start()
        try:
            yield
        finally:
            stop.set()
            if worker is not None:
                worker.join(timeout=10)
            if owned:
                rt.close()

    app = FastAPI(title="Sealflow API", version=API_VERSION, lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json")
    app.openapi = openapi.document(app)  # type: ignore[method-assign]
    app.state.runtime = runtime
    app.state.trust = trust
    app.state.oidc_login = login
    if runtime is not None:  # a test client may skip the lifespan: be usable at once
        _bind(app, settings, runtime, oidc, login)
    problems.install(app)
    for module in (runs, approvals, dlq, definitions, notifications, health, metrics, events, callbacks):
        app.include_router(module.router)
    if settings.ui:  # the pages for people (docs/operations.md "The console: approvals and runs pages")
        from sealflow.server.ui import login as login_routes
        from sealflow.server.ui import operate, pages, runlist
        from sealflow.server.ui import runs as run_pages

        app.include_router(pages.router)
        app.include_router(operate.router)
        app.include_router(runlist.router)
        app.include_router(run_pages.router)
        app.include_router(login_routes.router)
    app.add_middleware(BodyLimit, limit=settings.max_body)
    app.add_middleware(openapi.Options, router=app)
    if settings.allow_open:
        app.add_middleware(OpenBanner)
    return app


def _bind(app: FastAPI, settings: ServerSettings, rt: Any, oidc: OidcVerifier | None, login: Any) -> None:
    """What the app keeps in the runtime's store (shared by every server process on it): the rate limits, the
    /ui sessions and the started OIDC logins (whose client secret comes from the runtime's secret providers)."""
    from sealflow.server.ui.sessions import Sessions

    # the server's own store (tokens, sessions, logins, its rate limits): the runtime's store object, typed as
    # the server's protocol once here (a store that keeps none is refused now, with a clear error)
    server = app.state.server_store = rt.server_state()
    app.state.authenticator = Authenticator(server, rt.clock, audit=rt.record, oidc=oidc,
                                            allow_open=settings.allow_open,
                                            limiter=RateLimiter(server, rt.clock, settings.rate, settings.burst,
                                                                name="principal"),
                                            metrics=getattr(getattr(rt, "telemetry", None), "metrics", None))
    app.state.ui_sessions = Sessions(server, rt.clock)
    if login is not None:
        from sealflow.execution.secrets import chain_for

        login.bind(server, rt.clock, chain_for(rt.config))


def from_env() -> FastAPI:
    """The factory of uvicorn's worker processes (``--workers N``)."""
    import os

    if os.environ.get("SEALFLOW_LOG_FORMAT") == "json":
        from sealflow.runtime.telemetry import logging as telemetry_logging

        telemetry_logging.setup("json")
    return create_app(ServerSettings.from_env())
