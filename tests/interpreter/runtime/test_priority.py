"""Run priority on the embedded default: a critical run submitted after low ones starts first; the
starvation guard lets an old low message pass newer critical ones."""

from __future__ import annotations

import threading
import time

import pytest
from dramatiq.worker import _WorkQueueItem
from interp_helpers import S, make_plan

from sealflow.execution.actions import action
from sealflow.runtime.config import RuntimeConfig
from sealflow.runtime.facade import Runtime
from sealflow.runtime.priority import AgingQueue, parse_priorities, queue_for, starvation_after
from sealflow.store import open_store


@pytest.fixture
def marked(registry):
    """``t.mark`` records the order runs start in; the run labelled ``block`` holds its thread until released."""
    started: list[str] = []
    block_started, release = threading.Event(), threading.Event()

    @action("t.mark", registry=registry, effect="read")
    def mark(ctx, label: str):
        started.append(label)
        if label == "block":
            block_started.set()
            release.wait(30)
        return {"label": label}

    return started, block_started, release


def plan_of(priority: str):
    return make_plan(S("mark", "action", action="t.mark", args={"label": "${{ input.label }}"}),
                     name=f"prio-{priority}", priority=priority)


def test_given_a_busy_worker_when_a_critical_run_comes_after_low_ones_then_it_starts_first(tmp_path, registry,
                                                                                            marked):
    started, block_started, release = marked
    # Given an embedded runtime with one worker thread, busy with a low run
    rt = Runtime(open_store(f"sqlite:///{tmp_path}/p.db"), registry, {}, worker_threads=1, worker_timeout_ms=20)
    try:
        low, critical = plan_of("low"), plan_of("critical")
        blocker = rt.submit(low, {"label": "block"}, initiator="user:t")
        rt.start()
        rt.dispatcher.flush()
        assert block_started.wait(10)
        # When four low runs and then one critical run are submitted and dispatched
        lows = [rt.submit(low, {"label": f"low{i}"}, initiator="user:t") for i in range(4)]
        crit = rt.submit(critical, {"label": "critical"}, initiator="user:t")
        rt.dispatcher.flush()
        time.sleep(0.2)  # every queue's consumer has fetched its messages
        release.set()
        for run_id in (blocker, crit, *lows):
            assert rt.drive(run_id, until="final", timeout=30).state == "completed"
        # Then the critical run started right after the one running, before every low run queued before it
        assert started == ["block", "critical", "low0", "low1", "low2", "low3"]
        assert rt.store.get_run(crit).priority == "critical"
    finally:
        release.set()
        rt.close()
        rt.store.close()


def test_given_a_run_submitted_elsewhere_when_it_is_dispatched_then_its_queue_is_its_priority_unread(tmp_path,
                                                                                                    registry, marked):
    # Given a critical run submitted by another process (this runtime has not seen it), on one store file
    store = f"sqlite:///{tmp_path}/p.db"
    other = Runtime(open_store(store), registry, {})
    rt = Runtime(open_store(store), registry, {})
    try:
        other.submit(plan_of("critical"), {"label": "c"}, initiator="user:t")

        def no_read(run_id):
            raise AssertionError(f"the dispatcher read run {run_id} to route its message")

        rt.priority_of._lookup = no_read
        # When this runtime dispatches it
        assert rt.dispatcher.flush() == 1
        # Then the message went to the critical queue, its priority taken with it from the outbox
        queued = {name: q.qsize() for name, q in rt.broker.queues.items() if q.qsize()}
        assert queued == {queue_for(rt.queue_name, "critical"): 1}
    finally:
        for r in (other, rt):
            r.close()
            r.store.close()


def test_given_priorities_then_each_has_its_own_queue_and_names_are_checked():
    # Given the base queue "sealflow", then normal keeps it and the others get a suffix
    assert [queue_for("sealflow", p) for p in ("critical", "high", "normal", "low")] == [
        "sealflow.critical", "sealflow.high", "sealflow", "sealflow.low"]
    assert parse_priorities("high, critical") == ("critical", "high")
    with pytest.raises(ValueError, match="unknown priority urgent; use some of: critical, high, normal, low"):
        parse_priorities("urgent")


def test_given_an_old_low_message_when_critical_ones_keep_coming_then_the_guard_takes_it_first():
    # Given a work queue with a 50 ms starvation guard holding a low message
    queue = AgingQueue(0.05)
    queue.put(_WorkQueueItem(30, "low"))
    queue.put(_WorkQueueItem(0, "critical-1"))
    # When it is fresh, then priority decides
    assert queue.get().message == "critical-1"
    # When it has waited past the guard while new critical messages arrived
    time.sleep(0.08)
    queue.put(_WorkQueueItem(0, "critical-2"))
    queue.put(_WorkQueueItem(0, "critical-3"))
    # Then it goes first, and the rest keep their priority order
    assert [queue.get().message for _ in range(3)] == ["low", "critical-2", "critical-3"]


def test_given_the_runtime_config_then_starvation_after_is_read_and_checked():
    # Given a priority section, then its starvation_after is used; a bad value names the key
    assert starvation_after(RuntimeConfig.from_dict({"priority": {"starvation_after": "2s"}}).extra) == 2.0
    assert starvation_after({}) == 10.0
    from sealflow.core.errors import ConfigError

    with pytest.raises(ConfigError, match="priority.starvation_after"):
        starvation_after({"priority": {"starvation_after": "soon"}})
    with pytest.raises(ConfigError, match="starvation_after"):
        starvation_after({"priority": {"starve": 1}})


def test_given_debug_logging_when_a_step_message_is_buffered_then_the_worker_says_so_before_a_thread_takes_it(caplog):
    # Given a worker's work queue, and a step message as a consumer hands it over (and a message of another shape)
    class Fetched:
        def __init__(self, args, queue_name="q.critical"):
            self.args, self.queue_name, self.message_id = args, queue_name, "m-1"

    queue = AgingQueue(10.0)
    # When they are put on it at DEBUG
    with caplog.at_level("DEBUG", logger="sealflow.priority"):
        queue.put(_WorkQueueItem(0, Fetched(("run_1", "mark", 2, 77))))
        queue.put(_WorkQueueItem(30, Fetched(("x",), "q.low")))
    # Then each is named, with its queue and how many wait, while both are still in the queue
    assert [r.getMessage() for r in caplog.records] == [
        "run run_1: step mark attempt 2: fetched from q.critical; 1 waiting for a thread",
        "a message that is not a step message (m-1): fetched from q.low; 2 waiting for a thread"]
    assert queue.qsize() == 2 and queue.get().message.args == ("run_1", "mark", 2, 77)
