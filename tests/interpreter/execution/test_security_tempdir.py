"""ctx.tempdir: per attempt, unpredictable, mode 0700, size-limited, removed when the step ends whatever the outcome."""

from __future__ import annotations

import os
import random
import stat
import threading

import pytest
from interp_helpers import S, make_plan, retry

from sealflow.core.errors import StepError
from sealflow.execution.actions import action
from sealflow.runtime.config import RuntimeConfig
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "scratch")


@pytest.fixture
def rt(tmp_path, registry, clock, root):
    runtime = Runtime(open_store(f"sqlite:///{tmp_path}/t.db", clock=clock), registry, {}, rng=random.Random(1),
                      worker_timeout_ms=20, config=RuntimeConfig(tempdir_max_bytes=4096, tempdir_root=root))
    yield runtime
    runtime.close()
    runtime.store.close()


@pytest.fixture
def seen(registry):
    got = {"dirs": [], "modes": [], "release": threading.Event(), "returned": threading.Event()}

    def note(ctx):
        path = ctx.tempdir
        got["dirs"].append(path)
        got["modes"].append(stat.S_IMODE(os.stat(path).st_mode))
        with open(os.path.join(path, "work.bin"), "wb") as fh:
            fh.write(b"x" * 100)
        return path

    @action("t.ok", registry=registry)
    def ok(ctx):
        note(ctx)
        return {"ok": True}

    @action("t.boom", registry=registry)
    def boom(ctx):
        note(ctx)
        raise RuntimeError("boom")

    @action("t.hang", registry=registry)
    def hang(ctx):
        note(ctx)
        got["release"].wait(10)
        got["returned"].set()
        return "late"

    @action("t.big", registry=registry)
    def big(ctx, size, ask):
        with open(os.path.join(ctx.tempdir, "big.bin"), "wb") as fh:
            fh.write(b"x" * size)
        if ask:
            got["usage"] = ctx.tempdir_usage()
        return "written"

    @action("t.none", registry=registry)
    def none(ctx):
        return "no temp"

    return got


def test_each_attempt_gets_a_private_unpredictable_directory_removed_on_success(rt, seen, root):
    status = rt.run(make_plan(S("a", "action", action="t.ok"), S("b", "action", action="t.ok")), {},
                    initiator="user:ana")
    assert status.state == "completed"
    a, b = seen["dirs"]
    # Then each attempt had its own directory, mode 0700, under the configured root, with a random name
    assert a != b and os.path.dirname(a) == root and seen["modes"] == [0o700, 0o700]
    assert os.path.basename(a).startswith("sealflow-") and len(os.path.basename(a)) > len("sealflow-") + 6
    # and both are gone
    assert not os.path.exists(a) and not os.path.exists(b) and os.listdir(root) == []


def test_the_directory_is_removed_when_the_attempt_fails(rt, seen, root):
    status = rt.run(make_plan(S("a", "action", action="t.boom", retry=retry("internal", max_attempts=1))), {},
                    initiator="user:ana")
    assert status.state == "failed" and not os.path.exists(seen["dirs"][0]) and os.listdir(root) == []


def test_a_timed_out_attempts_directory_is_removed_when_its_thread_returns(rt, seen):
    status = rt.run(make_plan(S("a", "action", action="t.hang", timeout_ms=200)), {}, initiator="user:ana")
    # Then the attempt timed out while its thread still runs: the directory is still in use
    assert status.state == "failed" and status.error[0] == "timeout"
    path = seen["dirs"][0]
    assert os.path.isdir(path)
    # When the thread finally returns, the directory goes
    seen["release"].set()
    assert seen["returned"].wait(5)
    for _ in range(100):
        if not os.path.exists(path):
            break
        threading.Event().wait(0.02)
    assert not os.path.exists(path)


def test_exceeding_the_size_limit_fails_the_attempt_with_policy_denied(rt, seen, root):
    # Given a limit of 4096 bytes and an action that writes 5000 (with a retry policy)
    plan = make_plan(S("a", "action", action="t.big", args={"size": 5000, "ask": False},
                       retry=retry("timeout", max_attempts=3)))
    status = rt.run(plan, {}, initiator="user:ana")
    # Then the attempt fails with policy_denied, is not retried, and the directory is gone
    assert status.error[0] == "policy_denied" and "over the limit of 4096 bytes" in status.error[1]
    assert len(status.attempts) == 1 and os.listdir(root) == []


def test_tempdir_usage_reports_and_enforces_the_limit(rt, seen):
    assert rt.run(make_plan(S("a", "action", action="t.big", args={"size": 1000, "ask": True})), {},
                  initiator="user:ana").state == "completed"
    assert seen["usage"] == 1000
    status = rt.run(make_plan(S("a", "action", action="t.big", args={"size": 9000, "ask": True})), {},
                    initiator="user:ana")
    assert status.error[0] == "policy_denied" and "9000 bytes" in status.error[1]


def test_an_action_that_never_uses_it_creates_no_directory(rt, seen, root):
    rt.run(make_plan(S("a", "action", action="t.none")), {}, initiator="user:ana")
    assert not os.path.exists(root) or os.listdir(root) == []


def test_the_directory_cannot_be_used_after_the_attempt(registry, rt):
    kept = {}

    @action("t.keep", registry=registry)
    def keep(ctx):
        kept["ctx"] = ctx
        return ctx.tempdir

    rt.run(make_plan(S("a", "action", action="t.keep")), {}, initiator="user:ana")
    with pytest.raises(StepError, match="removed when the attempt ended"):
        _ = kept["ctx"].tempdir
