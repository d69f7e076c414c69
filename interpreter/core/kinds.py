"""Step kinds and their traits, for the runtime: the one table is the language's (:mod:`sealflow.dsl.kinds`),
which the compiler, lint and the diff query too; policy and engine ask it (``traits_of(step.kind).calls_model``)
instead of spelling sets of kind names."""

from __future__ import annotations

from sealflow.dsl.kinds import TRAITS, KindTraits, StepKind, kinds_with, traits_of

__all__ = ["TRAITS", "KindTraits", "StepKind", "kinds_with", "traits_of"]
