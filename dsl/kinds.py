"""Step kinds and their traits: one table that the compiler, lint, diff, policy and engine query.

A trait answers a question several places ask about a kind ("does it call a model?", "does it fan out?").
Asking the table instead of spelling a set of kind names in each place keeps the answers the same
everywhere, and a new kind is described once, here. Code that *dispatches* on the kind (the executor of
each kind, the compiler's per-kind payload, a message naming the kind) keeps its own branch.

The table lives in the language package because the language needs it too (the compiler, lint and the
security diff); ``sealflow.core.kinds`` re-exports it for the runtime (core may import the
language, never the reverse: tests/test_layering.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType


class StepKind(StrEnum):
    """What a plan step does (the ``kind`` the compiler records; stored and printed as plain strings)."""

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
    CALL = "call"


@dataclasses.dataclass(frozen=True, slots=True)
class KindTraits:
    """What is true of every step of one kind."""

    #: calls code or a model (``action``, ``ai``, ``agent``): the kinds that run, retry and time out; their
    #: ``validate`` rules check the output; a reviewer sees changes to their retry and timeout
    calls_out: bool = False
    #: calls a model (``ai``, ``agent``): model budgets (tokens, cost, tool calls) and the tenant's daily quota
    #: apply before an attempt; its output is untrusted until validated (lint); it may declare an output_schema
    calls_model: bool = False
    #: an attempt may hold a usage reservation against the tenant's daily quota (taken before each model
    #: call), which its commit settles (``Commit.holds_reservation``)
    reserves_budget: bool = False
    #: its effect is that of the actions it calls (an ``action``'s, an ``agent``'s tools'): reauthorisation and
    #: the security diff judge it by them; other kinds act on nothing outside the run
    has_effect: bool = False
    #: runs child runs (``map``, ``parallel``: sub-flows; ``call``: another workflow): no code, timeout or retry
    #: of its own (its children have theirs); its commit closes the fan-out; an attempt lost with its worker is
    #: simply run again
    fans_out: bool = False
    #: parks the run until a person decides or a time comes (``approval``, ``wait``)
    waits: bool = False
    #: ends the run (``succeed``, ``fail``): it has no ``next``
    terminal: bool = False
    #: chooses its next step itself, naming it in its output (``switch``)
    routes: bool = False

    @property
    def follows_next(self) -> bool:
        """Whether the step goes on to its ``next`` (an explicit edge): every kind that neither ends the run
        nor routes itself. A ``when`` that is false on one that does not adds a ``skip`` edge instead."""
        return not (self.terminal or self.routes)


_CALLS_MODEL = KindTraits(calls_out=True, calls_model=True, reserves_budget=True)

#: kind -> its traits (every :class:`StepKind` has a row; a test pins each)
TRAITS: Mapping[str, KindTraits] = MappingProxyType({
    StepKind.ACTION: KindTraits(calls_out=True, has_effect=True),
    StepKind.AI: _CALLS_MODEL,
    StepKind.AGENT: dataclasses.replace(_CALLS_MODEL, has_effect=True),
    StepKind.SWITCH: KindTraits(routes=True),
    StepKind.APPROVAL: KindTraits(waits=True),
    StepKind.WAIT: KindTraits(waits=True),
    StepKind.SET: KindTraits(),
    StepKind.FAIL: KindTraits(terminal=True),
    StepKind.SUCCEED: KindTraits(terminal=True),
    StepKind.MAP: KindTraits(fans_out=True),
    StepKind.PARALLEL: KindTraits(fans_out=True),
    StepKind.CALL: KindTraits(fans_out=True),
})


def traits_of(kind: str) -> KindTraits:
    """The traits of ``kind`` (a :class:`StepKind` or its string); KeyError for a kind the language lacks."""
    return TRAITS[kind]


def kinds_with(trait: str) -> tuple[StepKind, ...]:
    """The kinds that have ``trait`` (a :class:`KindTraits` field name), in the order of :class:`StepKind`."""
    return tuple(k for k in StepKind if getattr(TRAITS[k], trait))
