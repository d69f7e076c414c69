"""Step references: the one place that reads and writes the ``@gate`` / ``@compensate`` suffixes.

An attempt's step id is a plan step's id, or that id with a suffix naming what the attempt does for it:
``<step>@gate`` (the approval gate a ``requires_approval_if`` opened after the step succeeded) and
``<step>@compensate`` (undoing the step, :mod:`sealflow.engine.compensation`). The strings are
stored in the attempts table and printed by ``sealflow status``: their spelling never changes.
"""

from __future__ import annotations

import dataclasses
import functools
from enum import StrEnum


class StepRole(StrEnum):
    """What an attempt does for its plan step (the suffix after ``@``; ``""`` for the step itself)."""

    STEP = ""
    GATE = "gate"
    COMPENSATE = "compensate"


GATE_SUFFIX = "@" + StepRole.GATE
COMPENSATE_SUFFIX = "@" + StepRole.COMPENSATE


@dataclasses.dataclass(frozen=True, slots=True)
class StepRef:
    """An attempt's step id, parsed: the plan step it belongs to and its role."""

    step: str
    role: StepRole = StepRole.STEP

    @classmethod
    def parse(cls, step_id: str) -> StepRef:
        """``"record@gate"`` -> ``StepRef("record", GATE)``; an unknown suffix stays part of the step id."""
        return _parse(step_id) if cls is StepRef else _parse_uncached(cls, step_id)

    @classmethod
    def gate(cls, step: str) -> StepRef:
        return cls(step, StepRole.GATE)

    @classmethod
    def compensate(cls, step: str) -> StepRef:
        return cls(step, StepRole.COMPENSATE)

    @property
    def is_gate(self) -> bool:
        return self.role is StepRole.GATE

    @property
    def is_compensation(self) -> bool:
        return self.role is StepRole.COMPENSATE

    def __str__(self) -> str:
        return f"{self.step}@{self.role}" if self.role else self.step


def _parse_uncached(cls: type[StepRef], step_id: str) -> StepRef:
    base, at, suffix = step_id.rpartition("@")
    if at and suffix in (StepRole.GATE, StepRole.COMPENSATE):
        return cls(base, StepRole(suffix))
    return cls(step_id)


@functools.lru_cache(maxsize=4096)  # (a frozen value: shared safely; bounded: a message may name any step id)
def _parse(step_id: str) -> StepRef:
    return _parse_uncached(StepRef, step_id)


def split_step_id(step_id: str) -> tuple[str, bool]:
    """``"record@gate"`` -> ``("record", True)``; any other id -> ``(its plan step, False)``."""
    ref = StepRef.parse(step_id)
    return ref.step, ref.is_gate


def is_compensation(step_id: str | None) -> bool:
    return step_id is not None and StepRef.parse(step_id).is_compensation


def gate_id(step: str) -> str:
    return str(StepRef.gate(step))


def compensation_id(step: str) -> str:
    return str(StepRef.compensate(step))
