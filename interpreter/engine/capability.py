"""What this process lacks to execute a step: an action module, a model, an MCP server, a secret or a trust policy.

A process picks up work it did not submit: the sweep of ``sealflow run`` of workflow A hands it the step of
run B whose lease expired, a ``sealflow worker`` takes whatever message the broker holds, the step actor
carries a run on to its next step. A process without what that step needs (B's action module, the model it
calls, a secret its action declares, the trust policy that verifies its signature) used to claim it anyway:
the attempt failed with ``configuration`` and the run was dead-lettered, although another process could
have run it.

The engine asks :func:`step_lacks` *before* claiming (:meth:`~sealflow.engine.engine.Engine.handle`)
and leaves such a step alone: nothing changes (no attempt consumed, no lease, no dead letter). Its outbox row
stays sent, so the sweeper of any process sends it again after ``redeliver_after`` and a fresh embedded process
sends it at start: a process that has what the step needs claims it then. Sooner, a long-lived worker that
has it takes the step over as soon as it reads the ``step.left`` event (:mod:`sealflow.runtime.takeover`),
and so does a ``sealflow run`` waiting for its own run. :func:`plan_lacks` is the same
question for every step of a run (an operator's act that would continue it: service/readiness.py).

A verdict is not a lack: a trust policy that refuses the run, an unsigned run on a worker that executes only
signed ones, fail the step here as on every process (:mod:`sealflow.policy.trustgate`).
"""

from __future__ import annotations

from typing import Any

from sealflow.core.ids import StepRef
from sealflow.execution.secrets import SecretChain, env_name
from sealflow.providers.loader import Misconfigured

#: (kind, name): ("action", "crm.update"), ("model", "gpt-x"), ("secret", "crm_api_key"), ("mcp", "carrier"),
#: ("trust", why)
Lack = tuple[str, str]
#: the audit event a process appends when it leaves an attempt (detail: attempt, owner, lacks), once per
#: process and attempt: what any other process reads to say why the step waits (:func:`left_elsewhere`)
LEFT_EVENT = "step.left"

#: how to provide each kind of missing thing
HOW = {
    "action": "load the module that defines it: --actions MODULE, or name it under actions: in sealflow.yaml",
    "model": "define it under models: in the runtime configuration (--config FILE, config: in sealflow.yaml, "
             "or $SEALFLOW_CONFIG; docs/models.md)",
    "secret": "set the environment variable {env}, or put a file named {name!r} in the secrets folder "
              "(secrets.dir in the runtime configuration, or $SEALFLOW_SECRETS_DIR; docs/security.md)",
    "mcp": "name the MCP server under mcp: in sealflow.yaml or the runtime configuration (docs/project.md)",
    "trust": "pass the trust policy the run was signed for: --trust POLICY, trust: in sealflow.yaml, "
             "or $SEALFLOW_TRUST (docs/trust.md)",
}


def step_needs(step: Any, role: StepRef) -> tuple[list[str], list[str]]:
    """The action names and model names one attempt of ``step`` in ``role`` may call (a gate calls none)."""
    if role.is_gate:
        return [], []
    if role.is_compensation:
        return ([step.compensate.action] if step.compensate is not None else []), []
    actions: list[str] = [step.action] if step.action else []
    models: list[str] = []
    for spec in (step.ai, step.agent):
        if spec is not None:
            models += [spec.model, *getattr(spec, "fallback", ())]
    if step.agent is not None:
        actions += list(step.agent.tools)
    return actions, models


def secrets_missing(names: Any, chain: SecretChain) -> list[str]:
    missing = []
    for name in names:
        try:
            found = any(provider.get(name) is not None for provider in chain.providers)
        except Exception:  # noqa: BLE001 - a secret file that cannot be read is not held either
            found = False
        if not found:
            missing.append(name)
    return missing


def lacks_of(actions: list[str], models: list[str], registry: Any, provider_for: Any, services: Any) -> list[Lack]:
    """What of ``actions`` (with the secrets they declare) and ``models`` (with their api_key secret) this
    process lacks; ``services`` gives the secret chain, built only when an action declares a secret."""
    missing: dict[Lack, None] = {}
    for name in actions:
        act = registry.get(name)
        if act is None:
            missing[("action", name)] = None
        elif getattr(act, "secrets", ()):
            missing.update(dict.fromkeys(("secret", s) for s in secrets_missing(act.secrets, chain_of(services))))
    for name in models:
        try:
            provider = provider_for(name)
        except Exception:  # noqa: BLE001 - an unknown model: the lookup raises StepError("configuration")
            missing[("model", name)] = None
            continue
        if isinstance(provider, Misconfigured):  # configured, but its api_key secret is not held here
            missing[("secret", provider.secret) if provider.secret else ("model", name)] = None
    return list(missing)


def mcp_lacks(steps: list[Any], services: Any) -> list[Lack]:
    """The MCP servers the agents of ``steps`` use that this process does not configure, and the secrets the
    configured ones need that it does not hold."""
    needed = sorted({t.server for s in steps if s.agent is not None for t in s.agent.mcp_tools or ()})
    if not needed:
        return []
    from sealflow.core.errors import ConfigError
    from sealflow.execution.mcp.servers import servers_of

    try:
        servers = servers_of(getattr(services, "config", None))
    except ConfigError:
        servers = {}
    missing: dict[Lack, None] = {}
    for name in needed:
        if name not in servers:
            missing[("mcp", name)] = None
        elif servers[name].secrets:
            missing.update(dict.fromkeys(("secret", x) for x in secrets_missing(servers[name].secrets,
                                                                                  chain_of(services))))
    return list(missing)


def trust_lack(gate: Any, run: Any) -> Lack | None:
    """A gate without a policy cannot verify a signed run: a lack (a process with the policy can). Any other
    refusal is the gate's verdict, not a lack."""
    if gate is None or gate.policy is not None or gate.allow_unsigned:
        return None
    if (getattr(run, "signer", None) or "unsigned") == "unsigned":
        return None
    reason = gate.refusal(run)
    return None if reason is None else ("trust", reason)


def chain_of(services: Any) -> SecretChain:
    from sealflow.execution.secrets import chain_for

    return getattr(services, "secret_chain", None) or chain_for(getattr(services, "config", None))


def step_lacks(engine: Any, run: Any, step_id: str) -> list[Lack]:
    """What ``engine``'s process lacks to execute the attempt ``step_id`` of ``run`` (empty: it can)."""
    ref = StepRef.parse(step_id)
    step = engine.plan_step(run.plan_digest, ref.step)
    if step is None:
        return []  # not a step of the plan: the claim refuses the message, as before
    services = engine.services
    actions, models = step_needs(step, ref)
    missing = lacks_of(actions, models, services.registry, services.provider_for, services) \
        if actions or models else []
    if step.agent is not None and step.agent.mcp_tools and not ref.is_gate and not ref.is_compensation:
        missing += mcp_lacks([step], services)
    trust = trust_lack(engine.trust_gate, run)
    return missing + [trust] if trust is not None else missing


#: plan digest -> what :func:`plan_needs` found (a plan is immutable: its digest names its content)
_NEEDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
_NEEDS_MAX = 1024


def plan_needs(plan: Any) -> tuple[list[str], list[str]]:
    """Every action name and model name ``plan`` may call (steps, compensations, agent tools, fallbacks), in
    order, once each."""
    digest = getattr(plan, "digest", None)
    got = _NEEDS.get(digest) if digest else None
    if got is None:
        found = _plan_needs(plan)
        if digest:
            if len(_NEEDS) >= _NEEDS_MAX:
                _NEEDS.clear()
            _NEEDS[digest] = (tuple(found[0]), tuple(found[1]))
        return found
    return list(got[0]), list(got[1])


def _plan_needs(plan: Any) -> tuple[list[str], list[str]]:
    actions: list[str] = []
    models: list[str] = []
    for _, step in plan.all_steps():  # fan-out sub-flows included
        for role in (StepRef(step.id), StepRef.compensate(step.id)):
            a, m = step_needs(step, role)
            actions += a
            models += m
    return list(dict.fromkeys(actions)), list(dict.fromkeys(models))


def plan_lacks(engine: Any, run: Any) -> list[Lack]:
    """What ``engine``'s process lacks to execute every step ``run``'s plan may run (empty: it can)."""
    actions, models = plan_needs(engine.plan(run.plan_digest))
    services = engine.services
    missing = lacks_of(actions, models, services.registry, services.provider_for, services)
    missing += mcp_lacks([s for _, s in engine.plan(run.plan_digest).all_steps()], services)
    trust = trust_lack(engine.trust_gate, run)
    return missing + [trust] if trust is not None else missing


def describe_lack(kind: str, name: str) -> str:
    """One line: what is missing and how to provide it."""
    if kind == "trust":
        return f"{name}: {HOW[kind]}"
    how = HOW[kind].format(env=env_name(name), name=name) if kind == "secret" else HOW[kind]
    return f"missing {kind} {name!r}: {how}"


def left_elsewhere(store: Any, run_id: str, step_id: str, attempt: int, owner: str) -> list[tuple[str, list[Lack]]]:
    """The processes other than ``owner`` that left attempt ``attempt`` of ``step_id`` (audited
    :data:`LEFT_EVENT`), each with what it lacked, oldest first."""
    out = []
    for e in store.audit(run_id, event=LEFT_EVENT):  # only those rows: it is read by every status of a due step
        d = e.detail or {}
        if e.step_id == step_id and d.get("attempt") == attempt and d.get("owner") != owner:
            out.append((e.actor, [tuple(lack) for lack in d.get("lacks") or ()]))
    return out
