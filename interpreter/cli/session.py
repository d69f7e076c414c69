"""What a command opens: the runtime configuration, the access policy, action modules, the store, the runtime.

Nothing heavy is imported at module level (``sealflow validate`` imports this module through
:func:`load_action_metadata` and must never pay for the runtime).

**The demo world.** The embedded quick start (``run``, ``submit``, ``approve`` ... on the embedded default)
registers the demo actions (:mod:`sealflow.demo`) besides the ``--actions`` modules, so the README's flow works
with no setup. ``sealflow worker`` does not: a worker of a deployment loads exactly the ``--actions`` it is
given (``--actions sealflow.demo`` for the demo world).

**The project.** ``sealflow.yaml`` (:mod:`sealflow.cli.project`), found from the current folder upwards or
named by ``--project FILE`` / ``$SEALFLOW_PROJECT``, supplies what no flag and no ``SEALFLOW_*`` variable
gives: the store, the runtime configuration, the access policy, the trust policy, action modules (added to
``--actions``) and models (:func:`project`).

**Access.** Without an access policy (``--access FILE``, ``$SEALFLOW_ACCESS``) the embedded default runs in open
development mode and says so on stderr, once, in the commands that act (``run``, ``submit``, ``worker``,
``serve``; :data:`ACTING`), not on every read; commands that serve others (``submit`` to a shared
store, ``worker``) refuse to start without one (:func:`require_policy`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import click

from sealflow.cli.exits import fail_usage, refuse

if TYPE_CHECKING:
    from sealflow.cli.project import Project
    from sealflow.dsl.model import ActionInfo
    from sealflow.dsl.trust import TrustPolicy
    from sealflow.dsl.typecheck import ProjectFacts
    from sealflow.policy.access import AccessProvider
    from sealflow.policy.trustgate import TrustGate
    from sealflow.providers.registry import ProviderRegistry
    from sealflow.runtime.config import RuntimeConfig
    from sealflow.runtime.facade import Runtime
    from sealflow.runtime.status import RunStatus
    from sealflow.store.base import Store
    from sealflow.store.serverstate import ServerStore

#: the demo world's action module, loaded by the embedded quick start
DEMO = "sealflow.demo"


def with_demo(actions: tuple[str, ...]) -> tuple[str, ...]:
    """``actions`` with the demo world first: what the embedded quick start compiles and runs against."""
    return (DEMO,) + tuple(actions)


# ---------------------------------------------------------------- the project file

def project() -> Project | None:
    """This command's project (``--project``, else ``$SEALFLOW_PROJECT``, else ``sealflow.yaml`` in the current
    folder or above), read once per command; None when there is none. A broken file is a usage error."""
    from sealflow.cli.project import ProjectError, find, read

    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().ensure_object(dict) if ctx is not None else {}
    if "project" in obj:
        known: Project | None = obj["project"]
        return known
    path = obj.get("project_path") or os.environ.get("SEALFLOW_PROJECT") or find()
    try:
        found = read(path) if path else None
    except ProjectError as exc:
        fail_usage(f"{exc}\n  hint: the project file names the store, runtime configuration, access and trust "
                   "policies, actions and models of every command (docs/project.md); --project FILE picks another")
    obj["project"] = found
    return found


def _from_project(key: str) -> Any:
    found = project()
    return getattr(found, key) if found is not None else None


def trust_path(trust: str | None) -> str | None:
    """The trust policy: ``--trust``, else ``$SEALFLOW_TRUST``, else the project's ``trust:`` (None: none)."""
    return trust or os.environ.get("SEALFLOW_TRUST") or _from_project("trust")


def access_path(path: str | None) -> str | None:
    """The access policy file: ``--access``, else ``$SEALFLOW_ACCESS``, else the project's ``access:``."""
    return path if path is not None else os.environ.get("SEALFLOW_ACCESS") or _from_project("access")


def project_actions(actions: tuple[str, ...]) -> tuple[str, ...]:
    """The project's ``actions:`` then the ``--actions`` modules, once each (dotted names import from the
    project's root folder too)."""
    found = project()
    if found is not None and found.actions and str(found.root) not in sys.path:
        sys.path.insert(0, str(found.root))
    return tuple(dict.fromkeys((*(_from_project("actions") or ()), *actions)))


# ---------------------------------------------------------------- configuration and access

def load_config(path: str | None = None) -> RuntimeConfig:
    """The runtime configuration of this command (``--config``, else ``$SEALFLOW_CONFIG``, else the project's
    ``config:``, else defaults), with the project's ``models:`` and ``mcp:`` when that file has no such section."""
    from sealflow.runtime.config import ConfigError, RuntimeConfig

    if path is None:
        ctx = click.get_current_context(silent=True)
        obj = ctx.find_root().obj if ctx is not None else None
        path = (obj or {}).get("config_path") if isinstance(obj, dict) else None
    path = path or os.environ.get("SEALFLOW_CONFIG") or _from_project("config")
    try:
        config = RuntimeConfig.from_env(path)
        added = {key: value for key in ("models", "mcp")
                 if (value := _from_project(key)) is not None and key not in config.extra}
        if added:
            import yaml

            raw: dict[str, Any] = {}
            if path:
                with open(path, encoding="utf-8") as fh:
                    raw = yaml.safe_load(fh) or {}
            config = RuntimeConfig.from_dict({**raw, **added}, source=path or str(_from_project("path")))
        return config
    except ConfigError as exc:
        fail_usage(str(exc))


def load_access(path: str | None, *, quiet: bool = False) -> AccessProvider:
    """The access provider for ``path`` (None: ``$SEALFLOW_ACCESS``, else open development mode, announced
    on stderr); an unreadable or invalid policy prints its located diagnostics and exits 2."""
    from sealflow.policy.access import AccessPolicyError, access_provider, is_open

    path = access_path(path) or None
    try:
        provider = access_provider(path)
    except AccessPolicyError as exc:
        for d in exc.diagnostics:
            click.echo(d.format(), err=True)
        fail_usage((exc.message if not exc.diagnostics else f"access policy {path} is invalid (see above)")
                   + "\n  hint: an access policy names tenants, their roles (permissions) and members; fix the file "
                   "or point --access / $SEALFLOW_ACCESS / access: in sealflow.yaml at another (docs/security.md)")
    if is_open(provider) and not quiet and _acts():
        click.echo("sealflow: warning: OPEN DEVELOPMENT MODE: no access policy (--access FILE or SEALFLOW_ACCESS), "
                   "so every principal holds every permission and role; runs record access: open-development",
                   err=True)
    return provider


#: the commands that act (start runs or serve others): the open-development-mode warning is theirs, once each
ACTING = frozenset({"run", "submit", "worker", "serve"})


def _acts() -> bool:
    """Whether this command is one of :data:`ACTING` (outside a command line: yes)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return True
    obj = ctx.find_root().ensure_object(dict)
    if ctx.info_name not in ACTING or obj.get("warned_open"):
        return False
    obj["warned_open"] = True
    return True


def is_shared_store(url: str | None) -> bool:
    """Whether the store URL names a store others share (anything but a local SQLite file)."""
    url = url or os.environ.get("SEALFLOW_STORE") or _from_project("store")
    return url is not None and url != "" and not url.startswith("sqlite:///")


def require_policy(provider: AccessProvider, what: str) -> None:
    """Exit 1 when ``what`` (a worker, a server, a submit to a shared store) would start in open mode.
    The hook for ``sealflow worker`` and ``sealflow serve``: call it before starting."""
    from sealflow.policy.authz import PolicyRequired
    from sealflow.policy.authz import require_policy as check

    try:
        check(provider, what)
    except PolicyRequired as exc:
        refuse(exc.message)


# ---------------------------------------------------------------- action modules

def import_actions(actions: tuple[str, ...], *, demo: bool) -> None:
    """Register the project's and the ``--actions`` modules (and the demo world when ``demo``); one that fails
    is a usage error."""
    from sealflow.cli.actions_loader import ActionsLoadError
    from sealflow.cli.actions_loader import import_actions as load

    actions = project_actions(actions)
    try:
        load(with_demo(actions) if demo else tuple(actions))
    except ActionsLoadError as exc:
        fail_usage(str(exc))


def load_action_metadata(actions: tuple[str, ...]) -> dict[str, ActionInfo] | None:
    """The compiler's view of the actions ``actions`` (and the project's) register (None when none are named)."""
    actions = project_actions(actions)
    if not actions:
        return None
    from sealflow.cli.actions_loader import ActionsLoadError, load_actions

    try:
        return load_actions(actions)
    except ActionsLoadError as exc:
        fail_usage(str(exc))


def project_facts(*, secrets: bool = False) -> ProjectFacts:
    """What the project around the definitions provides, for the compiler's type checks: the configured model
    names when a project file or a runtime configuration is in use (else None: models are not checked), and
    with ``secrets`` whether each secret resolves here (``validate`` warns, C427; ``lint`` does not, since CI
    holds no secrets)."""
    from sealflow.dsl.typecheck import ProjectFacts

    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    configured = ((obj or {}).get("config_path") if isinstance(obj, dict) else None) \
        or os.environ.get("SEALFLOW_CONFIG") or _from_project("config")
    if project() is None and not configured:
        return ProjectFacts()
    from sealflow.providers.config import parse_models
    from sealflow.runtime.config import ConfigError

    config = load_config()
    try:
        models = frozenset({"default", *parse_models(config.extra.get("models"), source=config.source)})
    except ConfigError as exc:
        fail_usage(str(exc))
    secret_known: Callable[[str], bool] | None = None
    if secrets:
        from sealflow.engine.capability import secrets_missing
        from sealflow.execution.secrets import chain_for

        chain = chain_for(config)

        def known_here(name: str) -> bool:
            return not secrets_missing([name], chain)

        secret_known = known_here
    return ProjectFacts(models=models, secret_known=secret_known)


# ---------------------------------------------------------------- the store and the runtime

def store_location(store_url: str | None) -> str | None:
    """The store URL to open (``--store``, else ``$SEALFLOW_STORE``, else the project's ``store:``, else
    ``.sealflow/state.db`` beside ``sealflow.yaml``); None is the default file, whose folder ``.sealflow`` is
    made here."""
    url = store_url or os.environ.get("SEALFLOW_STORE") or _from_project("store")
    found = project()
    if url is None and found is not None:
        os.makedirs(found.root / ".sealflow", exist_ok=True)
        url = found.default_store
    if url is None:
        os.makedirs(".sealflow", exist_ok=True)
    return url


def open_store(store_url: str | None) -> Store:
    """The bare store (no runtime, no actions): for commands that only read it."""
    from sealflow.store import StoreError
    from sealflow.store import open_store as open_

    try:
        return open_(store_location(store_url))
    except StoreError as exc:
        fail_usage(str(exc))


def server_of(store: Any) -> ServerStore:
    """``store`` as the server's store (API tokens, sessions); one that keeps none is a usage error, said plainly."""
    from sealflow.store import StoreError
    from sealflow.store.serverstate import server_store

    try:
        return server_store(store)
    except StoreError as exc:
        store.close()
        fail_usage(str(exc))


@contextlib.contextmanager
def open_runtime(store_url: str | None, actions: tuple[str, ...] = (), *, access: Any = None, demo: bool = True,
                 trust: str | None = None, record: str | None = None, replay: str | None = None,
                 gate: bool = True) -> Iterator[Runtime]:
    """A Runtime on the given store, with the ``--actions`` modules (and the demo world when ``demo``)
    registered, under the access policy ``access`` (a file, a provider; None: ``$SEALFLOW_ACCESS``, else open
    development mode). The steps this process executes pass the trust gate of ``trust`` (else
    ``$SEALFLOW_TRUST``; :func:`executor_gate`). ``record``: every model call is also written to that JSONL
    file; ``replay``: model calls are answered from that file only, no provider is called
    (:mod:`sealflow.providers.recording`). While it is open, what this process prints has the
    secrets it resolves redacted (:mod:`sealflow.core.redacted_output`)."""
    from sealflow.core import redacted_output

    lift = redacted_output.arm()
    try:
        with _runtime(store_url, actions, access=access, demo=demo, trust=trust, record=record, replay=replay,
                      gate=gate) as rt:
            yield rt
    finally:
        lift()


@contextlib.contextmanager
def _runtime(store_url: str | None, actions: tuple[str, ...], *, access: Any, demo: bool, trust: str | None,
             record: str | None, replay: str | None, gate: bool = True) -> Iterator[Runtime]:
    provider = access if access is not None and not isinstance(access, str) else load_access(access)
    import_actions(actions, demo=demo)
    from sealflow.runtime.facade import Runtime
    from sealflow.store import StoreError

    url = store_location(store_url)
    # the command line has said so itself (load_access): no second copy from the runtime's logger
    logging.getLogger("sealflow.access").setLevel(logging.ERROR)
    # a store server that does not answer is said once per look by `drive` (sealflow.run), not by every
    # connection attempt of the pool
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    from sealflow.core.errors import ConfigError

    try:
        config = load_config()
        if demo:  # the demo world's MCP server (the carrier), unless this project names one of that name
            config = with_demo_mcp(config)
        # the trust gate of a process that executes steps, made with the engine's actor name
        rt = Runtime(url, access=provider, config=config, providers=model_calls(config, record, replay),
                     trust_gate=(lambda actor: executor_gate(trust, actor)) if gate else None)
    except (StoreError, ConfigError) as exc:
        fail_usage(str(exc))
    from sealflow.runtime.driving import STORE_OUTAGE_S

    rt.store_outage_s = STORE_OUTAGE_S  # a command waiting for its run rides out a store server's restart
    try:
        yield rt
    finally:
        rt.close()


def with_demo_mcp(config: RuntimeConfig) -> RuntimeConfig:
    """``config`` with the demo world's MCP servers (:data:`sealflow.demo.mcp_carrier.SERVERS`) added under
    ``mcp:`` where it does not name a server of the same name."""
    import dataclasses

    from sealflow.demo.mcp_carrier import SERVERS

    mine = config.extra.get("mcp") or {}
    if not isinstance(mine, dict) or set(SERVERS) <= set(mine):
        return config
    return dataclasses.replace(config, extra={**config.extra, "mcp": {**SERVERS, **mine}})


def model_calls(config: RuntimeConfig, record: str | None, replay: str | None) -> ProviderRegistry | None:
    """The providers for ``--record FILE`` / ``--replay FILE`` (None: the configuration's, as usual)."""
    if record and replay:
        fail_usage("--record and --replay exclude each other: record a run first, then replay it")
    if not (record or replay):
        return None
    from sealflow.providers.recording import RecordingRegistry, ReplayMiss, ReplayProvider, ReplayRegistry
    from sealflow.runtime.facade import model_providers

    if record:
        return RecordingRegistry(model_providers(config), record)
    assert replay is not None  # one of the two, checked above
    try:
        return ReplayRegistry(ReplayProvider(replay))
    except ReplayMiss as exc:
        fail_usage(str(exc))


def no_run(run_id: str) -> NoReturn:
    """Exit 2 with the one answer for a run that is unknown *or* that the caller may not see."""
    fail_usage(f"no run {run_id!r} in this store; `sealflow runs list` lists the runs you may see (a run of another "
               "store: --store URL, or run the command in its project's folder)")


def find_run(rt: Runtime, run_id: str, tenant: str | None = None, actor: str | None = None, *,
             children_offset: int = 0) -> RunStatus:
    """The status of ``run_id`` as ``actor`` in ``tenant`` (a fan-out's child runs from ``children_offset``); an
    unknown run -- or one ``actor`` may not read -- is a usage error."""
    from sealflow.store import NotFound

    try:
        return rt.status(run_id, tenant=tenant, actor=actor, children_offset=children_offset)
    except NotFound:  # a run the caller may not read reads exactly like an unknown one
        no_run(run_id)


def act_then_drive(rt: Runtime, run_id: str, principal: str, tenant: str, as_json: bool,
                   act: Callable[[Runtime], object]) -> None:
    """Do ``act(rt)`` on a run as ``principal`` -- the runtime authorises it: a run the principal may not act
    on is "no run" (exit 2), a refusal exits 1, a request the runtime refuses as it is written (a reason too
    long) exits 2 -- then drive the run on and show it."""
    from sealflow.core.errors import StepError
    from sealflow.policy.authz import Unauthorized
    from sealflow.store import InvalidOperation, NotFound

    try:
        act(rt)
    except NotFound:
        no_run(run_id)
    except Unauthorized as exc:
        refuse(f"unauthorized: {exc.message}")
    except InvalidOperation as exc:
        refuse(exc)
    except StepError as exc:
        fail_usage(exc.message)
    from sealflow.cli import render

    render.finish(rt.drive(run_id), as_json)


def trust_policy_problem(trust: str) -> str | None:
    """What is wrong with the trust policy at ``trust`` (it is missing, unreadable, invalid, or names a key that
    cannot be read), said in full; None when it loads. For ``doctor``, which reports rather than exits."""
    from sealflow.dsl.errors import DefinitionError
    from sealflow.dsl.trust import load_policy

    if not os.path.exists(trust):
        return f"{trust} does not exist (trust: in sealflow.yaml, $SEALFLOW_TRUST or --trust names it)"
    try:
        load_policy(trust)
    except DefinitionError as exc:
        return "; ".join(d.format().replace("\n", " ") for d in exc.diagnostics) or f"{trust} is invalid"
    except OSError as exc:
        return f"{trust}: {exc.strerror or exc}"
    return None


def load_trust_policy(trust: str) -> TrustPolicy:
    """The trust policy at ``trust``; an invalid or unreadable one is a usage error with located diagnostics."""
    from sealflow.dsl.errors import DefinitionError
    from sealflow.dsl.trust import load_policy

    if not os.path.exists(trust):
        fail_usage(f"the trust policy {trust} does not exist; fix the path that names it (--trust, $SEALFLOW_TRUST "
                   "or trust: in sealflow.yaml), or write the policy (docs/trust.md)")
    try:
        return load_policy(trust)
    except DefinitionError as exc:
        for d in exc.diagnostics:
            click.echo(d.format(), err=True)
        fail_usage(f"the trust policy {trust} is invalid")
    except OSError as exc:
        fail_usage(f"--trust {trust}: {exc.strerror or exc}")


def executor_gate(trust: str | None, actor: str) -> TrustGate | None:
    """The trust gate of a command that executes steps in its own process (``run``, ``approve``, ``reject``,
    ``cancel``, ``recover``, ``dlq redrive``, ``scheduler``): with a trust policy (``trust``, else
    ``$SEALFLOW_TRUST``) it executes only runs whose stored signed bytes verify against *that* policy, like a
    worker; without one (development) there is no gate and the process executes what the store holds."""
    path = trust_path(trust)
    if path is None:
        return None
    from sealflow.policy.trustgate import TrustGate

    return TrustGate(policy=load_trust_policy(path), actor=actor)
