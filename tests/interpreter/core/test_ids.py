"""Step references: the one place that reads and writes ``@gate`` and ``@compensate``."""

from __future__ import annotations

import json

from sealflow.core.errors import ERROR_CLASSES, ErrorClass
from sealflow.core.ids import StepRef, StepRole, compensation_id, gate_id, is_compensation, split_step_id
from sealflow.core.kinds import StepKind
from sealflow.core.states import RUN_STATES, STEP_STATES, RunState, StepState


def test_given_step_ids_when_parsed_then_gate_and_compensate_suffixes_are_read_in_one_place():
    assert split_step_id("a@gate") == ("a", True) and split_step_id("a") == ("a", False)
    assert split_step_id("a@compensate") == ("a", False) and is_compensation("a@compensate")
    assert str(StepRef.parse("a@gate")) == "a@gate" and compensation_id("a") == "a@compensate"
    assert not is_compensation(None) and not is_compensation("a")
    assert StepRef.parse("a@gate").role is StepRole.GATE and gate_id("a") == "a@gate"
    assert StepRef.parse("a@other") == StepRef("a@other")  # not a suffix of ours: part of the id


def test_given_the_enums_when_compared_and_serialised_then_they_are_the_stored_strings():
    assert RunState.COMPLETED == "completed" and json.dumps([StepState.RETRY_WAIT]) == '["retry_wait"]'
    assert f"{ErrorClass.RATE_LIMITED}" == "rate_limited" and {StepKind.AI: 1}["ai"] == 1
    assert tuple(RunState) == RUN_STATES and tuple(StepState) == STEP_STATES
    assert set(ERROR_CLASSES) == set(ErrorClass)
    assert all(type(s) is str for s in RUN_STATES + STEP_STATES)  # the tables hold plain strings
