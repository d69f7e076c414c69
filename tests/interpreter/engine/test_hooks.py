"""Engine middleware (engine/hooks.py): hooks given whole in the engine's configuration, called in order on claim,
execute and commit; an observer that raises is logged, naming it, and never fails the step; a gate may refuse."""

from __future__ import annotations

import dataclasses
import logging
import random

import pytest
from interp_helpers import S, make_plan

from sealflow.core.outcomes import Failed
from sealflow.engine.hooks import EngineConfig, EngineHooks
from sealflow.execution.actions import action
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store


class Recorder(EngineHooks):
    """An observer that writes down each hook it sees, as ``(its name, hook, step)``."""

    def __init__(self, name: str, seen: list):
        self.name, self.seen = name, seen

    def before_execute(self, x):
        self.seen.append((self.name, "before_execute", x.step_id))

    def around_attempt(self, x, refused, began, proceed):
        self.seen.append((self.name, "around_attempt:in", x.step_id))
        got = proceed()
        self.seen.append((self.name, "around_attempt:out", x.step_id))
        return got

    def around_execute(self, x, execute):
        self.seen.append((self.name, "around_execute", x.step_id))
        return execute(x)

    def after_execute(self, x, outcome):
        self.seen.append((self.name, "after_execute", x.step_id))
        return outcome

    def before_commit(self, x, commit):
        self.seen.append((self.name, "before_commit", x.step_id))
        return commit

    def run_ended(self, run_id, state, created_at):
        self.seen.append((self.name, "run_ended", state))


class Broken(EngineHooks):
    """An observer each of whose hooks raises (``around_attempt`` before or after the attempt, as told)."""

    name = "broken"

    def __init__(self, after: bool = False):
        self.after = after

    def claim_refused(self, reason):
        raise RuntimeError("claim_refused broke")

    def before_execute(self, x):
        raise RuntimeError("before_execute broke")

    def around_attempt(self, x, refused, began, proceed):
        if self.after:
            proceed()
        raise RuntimeError("around_attempt broke")

    def around_execute(self, x, execute):
        raise RuntimeError("around_execute broke")

    def after_execute(self, x, outcome):
        raise RuntimeError("after_execute broke")

    def before_commit(self, x, commit):
        raise RuntimeError("before_commit broke")

    def run_ended(self, run_id, state, created_at):
        raise RuntimeError("run_ended broke")


class Refuser(EngineHooks):
    """A gate that refuses every attempt of step ``b``."""

    name, gating = "refuser", True

    def before_execute(self, x):
        return Failed("policy_denied", "step b is not allowed here") if x.step_id == "b" else None


@dataclasses.dataclass
class World:
    runtime: Runtime
    calls: list


@pytest.fixture
def world(request, tmp_path, registry, clock):
    calls: list = []

    @action("t.call", registry=registry)
    def call(ctx):
        calls.append(ctx.step_id)
        return {"ok": True}

    hooks = request.param
    rt = Runtime(open_store(f"sqlite:///{tmp_path}/hooks.db", clock=clock), registry, {}, rng=random.Random(7),
                 worker_timeout_ms=20, hooks=hooks)
    yield World(rt, calls)
    rt.close()
    rt.store.close()


def two_steps():
    return make_plan(S("a", "action", action="t.call"), S("b", "action", action="t.call"))


SEEN: list = []


@pytest.mark.parametrize("world", [(Recorder("first", SEEN), Recorder("second", SEEN))], indirect=True)
def test_hooks_are_called_in_their_order_around_each_step(world):
    # Given an engine with two observers, first and second
    SEEN.clear()
    # When a run of two steps goes through
    status = world.runtime.run(two_steps(), {}, initiator="user:ana")
    # Then for each step: the gates in order, the attempt wrapped by the first outermost, the execution wrapped,
    # the outcome amended and the commit amended in order; and once the run ended, each is told so, in order
    assert status.state == "completed" and world.calls == ["a", "b"]
    inside = [
        ("first", "before_execute"), ("second", "before_execute"),
        ("first", "around_attempt:in"), ("second", "around_attempt:in"),
        ("first", "around_execute"), ("second", "around_execute"),
        ("first", "after_execute"), ("second", "after_execute"),
        ("first", "before_commit"), ("second", "before_commit"),
    ]
    out = [("second", "around_attempt:out"), ("first", "around_attempt:out")]
    # (the run ends in b's commit, inside b's attempt: before the attempt's wrappers return)
    ended = [("first", "run_ended", "completed"), ("second", "run_ended", "completed")]
    expected = [(n, h, "a") for n, h in inside + out] + [(n, h, "b") for n, h in inside] + ended + \
        [(n, h, "b") for n, h in out]
    assert expected == SEEN


@pytest.mark.parametrize("world", [(Broken(),), (Broken(after=True),)], indirect=True)
def test_an_observer_that_raises_is_logged_by_name_and_never_fails_the_step(world, caplog):
    # Given an engine with an observer every hook of which raises (its around hook before, or after, the attempt)
    # When a run of two steps goes through
    with caplog.at_level(logging.ERROR, logger="sealflow.engine"):
        status = world.runtime.run(two_steps(), {}, initiator="user:ana")
    # Then the run completed, each step ran exactly once, and each failure was logged naming the hook
    assert status.state == "completed" and world.calls == ["a", "b"]
    lines = [r.getMessage() for r in caplog.records if r.name == "sealflow.engine"]
    assert lines and all("engine hook 'broken' failed" in line for line in lines)
    assert {"before_execute", "around_attempt", "around_execute", "after_execute", "before_commit",
            "run_ended"} <= {line.split(" failed in ")[1].split(";")[0] for line in lines}


@pytest.mark.parametrize("world", [(Refuser(),)], indirect=True)
def test_a_gating_hook_refuses_an_attempt_which_then_does_not_run(world):
    # Given an engine with a gate that refuses step b
    # When a run of two steps goes through
    status = world.runtime.run(two_steps(), {}, initiator="user:ana", until="final")
    # Then a ran, b never did, and the run failed with the gate's refusal
    assert world.calls == ["a"]
    assert status.state == "failed" and status.run.error_class == "policy_denied"
    assert "step b is not allowed here" in status.run.error_message


def test_the_engine_configuration_is_frozen_and_read_only_through_the_engine(runtime):
    # Given a runtime's engine / When its configuration or a setting is assigned, Then it is refused
    with pytest.raises(dataclasses.FrozenInstanceError):
        runtime.engine.config.owner = "elsewhere"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        runtime.engine.trust_gate = None  # type: ignore[misc]
    # And the engine's gates come first, the runtime's telemetry after them
    names = [h.name for h in runtime.engine.hooks]
    assert names[:3] == ["budgets", "access", "breakers"] and names[3] == "telemetry"
    assert EngineConfig(owner="h:1:1").actor == "worker:h:1:1"
