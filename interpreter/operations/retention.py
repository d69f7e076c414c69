"""Retention for workers: the runtime configuration's ``retention:`` section.

    retention:
      finished_runs: 30d    # delete finished runs last changed longer ago than this
      every: 1h             # how often a worker looks (default 1h)
      dead_letters: false   # also runs still in the dead-letter queue (default: kept)

A worker with this section prunes as ``sealflow store prune --older-than 30d`` does
(:mod:`sealflow.store.prune`: batches, a ``store.pruned`` checkpoint in the audit chain).
Several workers may prune at once: each batch is one transaction, a run is deleted once.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from sealflow.core.errors import ConfigError
from sealflow.store.ledger import RunLedger

if TYPE_CHECKING:
    from sealflow.store.prune import PruneReport

log = logging.getLogger("sealflow.retention")


@runtime_checkable
class Prunable(Protocol):
    """A store that prunes finished runs (:class:`~sealflow.store.prune.PruneMixin`: both backends; not yet in the
    ``Store`` contract)."""

    def prune_runs(self, before: float, now: float, *, actor: str = ..., include_dead_letters: bool = ...,
                   dry_run: bool = ...) -> PruneReport: ...
_KEYS = {"finished_runs", "every", "dead_letters"}


def _seconds(value: Any, where: str) -> float:
    from sealflow.dsl.durations import DurationError, parse_ms

    try:
        return parse_ms(value) / 1000
    except DurationError as exc:
        raise ConfigError(f"{where}: {exc}") from None


@dataclasses.dataclass
class Retention:
    older_than: float
    every: float = 3600.0
    dead_letters: bool = False
    _next: float = 0.0

    @classmethod
    def from_config(cls, extra: Mapping[str, Any] | None) -> Retention | None:
        """The ``retention:`` section, or None when there is none."""
        section = (extra or {}).get("retention")
        if section is None:
            return None
        if not isinstance(section, Mapping) or set(map(str, section)) - _KEYS or "finished_runs" not in section:
            raise ConfigError("retention: must be a map with finished_runs (e.g. 30d) and optionally every (e.g. "
                              "1h) and dead_letters (true/false)")
        older = _seconds(section["finished_runs"], "retention.finished_runs")
        every = _seconds(section.get("every", "1h"), "retention.every")
        if older <= 0 or every <= 0:
            raise ConfigError("retention: finished_runs and every must be more than zero")
        return cls(older, every, bool(section.get("dead_letters", False)))

    def maybe_prune(self, store: RunLedger, now: float, actor: str) -> int:
        """Prune if it is time; how many runs went."""
        if time.monotonic() < self._next:
            return 0
        self._next = time.monotonic() + self.every
        report = store.prune_runs(now - self.older_than, now, actor=actor, include_dead_letters=self.dead_letters)
        if report.total:
            log.info("retention: deleted %d finished run(s) older than %.0f s (checkpoints in the audit chain)",
                     report.total, self.older_than)
        return report.total
