"""Operating circuit breakers: list them with their settings, reset one (audited).

The breakers themselves are :mod:`sealflow.core.breakers` (rules),
:mod:`sealflow.store.sql.breakers` (state in the store) and
:mod:`sealflow.execution.breakers` (calls through them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sealflow.core import breakers as rules
from sealflow.policy.access import AccessProvider
from sealflow.policy.operations import require_operator
from sealflow.store.base import AuditEvent, Store
from sealflow.store.limits import Limits


def settings_of(name: str, extra: Mapping[str, Any] | None, models: Any = None) -> rules.BreakerSettings:
    """A step breaker's settings from the runtime config; ``model:<name>`` from the models' config."""
    if name.startswith("model:") and models is not None:
        spec = getattr(getattr(models, "get", lambda _n: None)(name[len("model:"):]), "circuit_breaker", None)
        if spec is not None:
            return rules.BreakerSettings(failures=spec.failures, window=spec.window, cool_down=spec.cool_down)
    return rules.settings_for(name, extra)


def listing(store: Limits, now: float, extra: Mapping[str, Any] | None = None,
            models: Any = None) -> list[dict[str, Any]]:
    """Every breaker the store knows: state, failures in the window, when an open one may probe again."""
    out = []
    for rec in store.breakers():
        settings = settings_of(rec.name, extra, models)
        reopens = rec.reopens_at(settings)
        out.append({"name": rec.name, "state": rec.state, "failures": rec.failures,
                    "threshold": settings.failures, "window_s": settings.window, "cool_down_s": settings.cool_down,
                    "probe_in_s": None if reopens is None or rec.state != "open" else round(max(0.0, reopens - now), 3),
                    "last_error": rec.last_error, "updated_at": rec.updated_at})
    return out


def reset(store: Store, name: str, now: float, *, actor: str, access: AccessProvider,
          tenant: str = "default") -> bool:
    """Close breaker ``name`` and forget its failures (audited ``circuit_reset``); False if unknown. A breaker
    guards every tenant's calls, so only an operator (or open development mode) may: :class:`OperatorOnly`."""
    require_operator(access, actor, f"reset circuit breaker {name!r}")
    done = store.breaker_reset(name, now)
    if done:
        store.append_audit(AuditEvent("circuit_reset", None, actor, state_after="closed", tenant=tenant,
                                      detail={"breaker": name, "tenant": tenant}), now)
    return done
