"""The step kinds' traits: one table (:mod:`sealflow.dsl.kinds`) that the compiler, lint, the diff, policy and
engine query instead of each spelling its own set of kind names. Every trait of every kind is pinned here:
changing one changes what several places do, so it must be a deliberate edit of this test too."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from sealflow.dsl import kinds, model, plan
from sealflow.dsl.kinds import TRAITS, KindTraits, StepKind, kinds_with, traits_of

#: kind -> the traits true of it (every other trait is false)
EXPECTED: dict[str, set[str]] = {
    "action": {"calls_out", "has_effect", "follows_next"},
    "ai": {"calls_out", "calls_model", "reserves_budget", "follows_next"},
    "agent": {"calls_out", "calls_model", "reserves_budget", "has_effect", "follows_next"},
    "switch": {"routes"},
    "approval": {"waits", "follows_next"},
    "wait": {"waits", "follows_next"},
    "set": {"follows_next"},
    "fail": {"terminal"},
    "succeed": {"terminal"},
    "map": {"fans_out", "follows_next"},
    "parallel": {"fans_out", "follows_next"},
    "call": {"fans_out", "follows_next"},
}

TRAIT_NAMES = [f.name for f in dataclasses.fields(KindTraits)] + ["follows_next"]


def _true_of(traits: KindTraits) -> set[str]:
    return {name for name in TRAIT_NAMES if getattr(traits, name)}


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_given_a_kind_when_its_traits_are_read_then_they_are_the_pinned_ones(kind):
    # Given a step kind of the language
    # When its traits are looked up by its string (as the plan stores it) and by its enum member
    by_string, by_member = traits_of(kind), traits_of(StepKind(kind))
    # Then both are the same row, and exactly the pinned traits are true
    assert by_string is by_member
    assert _true_of(by_string) == EXPECTED[kind]


def test_given_the_table_then_every_kind_has_one_row_and_every_trait_is_pinned():
    # Given the table and the enum
    # When their kinds are compared with the pinned ones
    # Then each kind of the language has exactly one row, and no trait goes unpinned
    assert list(TRAITS) == list(StepKind) and set(EXPECTED) == {k.value for k in StepKind}
    assert all(isinstance(t, KindTraits) for t in TRAITS.values())
    assert set(TRAIT_NAMES) == {n for ks in EXPECTED.values() for n in ks} | {"follows_next"}


@pytest.mark.parametrize("trait", TRAIT_NAMES)
def test_given_a_trait_when_its_kinds_are_listed_then_they_are_in_the_enums_order(trait):
    # Given a trait
    # When the kinds that have it are listed
    listed = kinds_with(trait)
    # Then they are the pinned ones, in the order of StepKind (callers iterate them: the order is stable)
    assert [k.value for k in listed] == [k for k in EXPECTED if trait in EXPECTED[k]]


def test_given_an_unknown_kind_when_its_traits_are_read_then_it_is_refused():
    # Given a kind the language does not have
    # When its traits are read, Then the lookup fails rather than answering "no trait"
    with pytest.raises(KeyError):
        traits_of("loop")


def test_given_the_table_when_written_to_then_it_is_read_only():
    # Given the table and a row
    # When either is changed at run time, Then it refuses (one table, the same for every reader)
    with pytest.raises(TypeError):
        TRAITS["loop"] = KindTraits()  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        traits_of("ai").calls_model = False  # type: ignore[misc]


def test_given_the_model_and_the_plan_then_they_name_the_kinds_of_the_table():
    # Given the definition model's kind keys and the plan's kind field type
    # When they are compared with the enum, Then all three name the same kinds in the same order
    names = tuple(k.value for k in StepKind)
    assert names == model.KIND_KEYS and all(type(k) is str for k in model.KIND_KEYS)
    assert typing.get_args(plan.StepKind) == names
    assert kinds.StepKind is StepKind


def test_given_the_runtime_then_it_reads_the_same_table():
    # Given the runtime's core module of kinds
    from sealflow.core import kinds as core_kinds

    # When its names are compared with the language's, Then they are the same objects (one table, re-exported)
    assert core_kinds.StepKind is StepKind and core_kinds.TRAITS is TRAITS and core_kinds.traits_of is traits_of
