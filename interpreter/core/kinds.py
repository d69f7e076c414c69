"""Step kinds: what a plan step does (the ``kind`` the compiler records; stored and printed as plain strings)."""

from __future__ import annotations

from enum import StrEnum


class StepKind(StrEnum):
    ACTION = "action"
    AI = "ai"
    AGENT = "agent"
    SWITCH = "switch"
    APPROVAL = "approval"
    WAIT = "wait"
    SET = "set"
    FAIL = "fail"
    SUCCEED = "succeed"
    MAP = "map"
    PARALLEL = "parallel"


#: the kinds that call code or a model (validations apply to their output; budgets count them)
CALLING_KINDS = frozenset({StepKind.ACTION, StepKind.AI, StepKind.AGENT})
