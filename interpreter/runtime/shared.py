"""What every tenant of a store shares, read and reset through the facade by its operators: the circuit breakers
(their state; a reset) and the schedules of the definitions the store knows (their next fire time).

Each method refuses a principal the access policy does not name an operator (:class:`OperatorOnly`), as
``sealflow breakers`` and ``sealflow definitions`` do: what they show and change reaches every tenant.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from sealflow.core.schedule import ScheduleError, next_slot
from sealflow.policy.operations import require_operator
from sealflow.runtime import breakers
from sealflow.store.errors import NotFound, PlanTampered

if TYPE_CHECKING:
    from sealflow.core.clock import Clock
    from sealflow.engine.engine import Engine
    from sealflow.policy.access import AccessProvider
    from sealflow.runtime.config import RuntimeConfig
    from sealflow.store.base import Store


class Shared:
    """Methods of :class:`~sealflow.runtime.facade.Runtime` (see this module)."""

    if TYPE_CHECKING:
        store: Store
        engine: Engine
        access: AccessProvider
        clock: Clock
        config: RuntimeConfig

    def breaker_list(self, *, actor: str) -> list[dict[str, Any]]:
        """Every circuit breaker the store knows, as ``sealflow breakers list --json`` shows it (operators)."""
        require_operator(self.access, actor, "list the circuit breakers")
        return breakers.listing(self.store, self.clock.now(), self.config.extra)

    def breaker_reset(self, name: str, *, actor: str, tenant: str) -> bool:
        """Close breaker ``name`` and forget its failures, audited ``circuit_reset`` (operators); False: unknown."""
        return breakers.reset(self.store, name, self.clock.now(), actor=actor, access=self.access, tenant=tenant)

    def schedules(self, *, actor: str) -> list[dict[str, Any]]:
        """The schedules (``trigger.schedule``) of the definitions the store knows (operators): with a registry,
        its active versions; else the newest stored plan of each workflow. Each with its cron, time zone,
        ``run_as`` and next fire time (``next_at``, epoch seconds; None with ``error`` when it cannot be
        computed here). What a ``sealflow scheduler`` fires is what its own files say."""
        require_operator(self.access, actor, "read the schedules of the definition registry")
        registry = [(d.name, d.version, d.digest) for d in self.store.definitions() if d.active]
        if not registry:
            newest: dict[str, tuple[str, int, str]] = {}
            for name, version, digest, _ in self.store.stored_plans():
                if name not in newest or version >= newest[name][1]:
                    newest[name] = (name, version, digest)
            registry = list(newest.values())
        now = dt.datetime.fromtimestamp(self.clock.now(), dt.UTC)
        out = []
        for name, version, digest in sorted(registry):
            try:
                plan = self.engine.plan(digest)
            except (PlanTampered, NotFound):
                continue
            schedule = plan.trigger.schedule if plan.trigger is not None else None
            if not schedule:
                continue
            row: dict[str, Any] = {"workflow": name, "version": version, "digest": digest,
                                   "cron": schedule.get("cron"), "timezone": schedule.get("timezone"),
                                   "run_as": schedule.get("run_as"), "next_at": None}
            try:
                row["next_at"] = next_slot(str(schedule.get("cron")), schedule.get("timezone"), now).timestamp()
            except ScheduleError as exc:
                row["error"] = str(exc)
            out.append(row)
        return out
