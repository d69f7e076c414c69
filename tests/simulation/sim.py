"""A deterministic simulator of Sealflow's runtime: the real engine and store, driven by a seeded scheduler.

One *schedule* is a seed. From it the scheduler draws everything that happens, one event at a time, in one
thread: runs submitted, the outbox dispatched into a simulated broker, messages delivered to simulated
workers (each a real :class:`~sealflow.engine.engine.Engine` with its own owner id) in any order,
duplicated or dropped, the sweeper, the clock moving (small steps, lease expiries, timers), and faults at every
numbered point of an attempt (and the clock stepping back a few seconds, as a host's may):

====================  ===========================================================================
``before_claim``      the worker dies holding the message, before it claims it
``after_claim``       the worker dies right after its claim
``before_effect``     the worker dies inside the action, before the action's effect
``after_effect``      the worker dies after the effect, before the commit
``after_commit``      the worker dies after the commit, before it acknowledges (the broker redelivers)
``commit_error``      the store refuses the commit for a while (disk full, the connection lost)
``claim_error``       the store refuses the claim (the message is lost; the sweeper finds it again)
``pause``             the worker stalls inside the action (before or after its effect) and resumes later,
                      maybe after its lease was lost: a zombie
====================  ===========================================================================

and the failures an action can have (``unavailable``, ``timeout``, a result that breaks its declared output). A
person answers what waits for one
(approvals; lost attempts whose outcome is unknown, deciding by looking at the target as a person would), and
now and then cancels a run (its completed steps with a ``compensate`` are undone).
Then faults stop, paused workers resume, and the world is driven until every run has ended (a bound on the
rounds: past it, something loops). The invariants are checked (:func:`check`); a violation raises
:class:`Violation` naming the seed and the trace's last events. ``SEALFLOW_SIM_SEED=N`` replays schedule N
exactly: the same events in the same order, the same outcome.

Determinism: one thread at a time touches the world (a paused worker's thread runs only while the
scheduler waits for it); the global ``random`` (attempt tokens), the engine's retry jitter and every choice
come from the seed; the lease and cancellation re-checks that would read real time are made on every call
(``RECHECK_S = 0``); run ids (which hold random bits) are mapped to their submission order wherever an order
matters.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import tempfile
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, TypedDict

from sealflow.cli.actions_loader import action_info
from sealflow.core import states
from sealflow.core.clock import FakeClock
from sealflow.core.errors import StepError
from sealflow.dsl.api import compile_bytes, compile_file
from sealflow.dsl.model import ActionInfo
from sealflow.engine.engine import Engine
from sealflow.engine.hooks import EngineConfig
from sealflow.engine.poison import OUTCOME_UNKNOWN
from sealflow.execution.actions import Registry, action
from sealflow.execution.callbacks import CallbackRefused
from sealflow.runtime.config import RuntimeConfig
from sealflow.runtime.facade import Runtime
from sealflow.store import auditverify
from sealflow.store.errors import InvalidOperation, StoreUnavailable
from sealflow.store.records import Message

POINTS = ("before_claim", "after_claim", "before_effect", "after_effect", "after_commit", "commit_error",
          "claim_error", "pause")
LOST_ATTEMPTS = 3
#: a step's timeout (fake time): long, so that a paused worker's real wait never runs out; leases are lost by
#: moving the clock past it
TIMEOUT_S = 600
REDELIVER_AFTER = 60.0
CHAOS_EVENTS = 160
HEAL_ROUNDS = 400

PIPELINE = """\
sealflow: 1
name: sim-pipeline
version: 1
owner: team:sim
permissions: [sim:work, sim:deliver, sim:notify]
budget: {max_steps: 40, max_runtime: 8h}
defaults: {timeout: 10m}
retry:
  flaky: {on: [unavailable, timeout], max_attempts: 3, backoff: {initial: 1s, factor: 2, max: 10s, jitter: full}}
steps:
  - id: fetch
    action: sim.work
    with: {n: "${{ input.n }}"}
    permissions: [sim:work]
    retry: flaky
  - id: pause
    wait: {for: 30s}
  - id: deliver
    action: sim.deliver
    with: {n: "${{ steps.fetch.output.n }}"}
    permissions: [sim:deliver]
    idempotency_key: "${{ run.id }}:deliver"
    retry: flaky
  - id: notify
    action: sim.sms
    with: {n: "${{ input.n }}"}
    permissions: [sim:notify]
  - id: done
    succeed: {}
"""

GATED = """\
sealflow: 1
name: sim-gated
version: 1
owner: team:sim
permissions: [sim:work, sim:deliver]
budget: {max_steps: 30}
defaults: {timeout: 10m}
approvals: {approvers: ["user:boss"], timeout: 12h}
steps:
  - id: fetch
    action: sim.work
    with: {n: "${{ input.n }}"}
    permissions: [sim:work]
    compensate: {action: sim.undo, with: {n: "${{ input.n }}"}}
  - id: ask
    approval: {timeout: 12h}
  - id: deliver
    action: sim.deliver
    with: {n: "${{ input.n }}"}
    permissions: [sim:deliver]
    idempotency_key: "${{ run.id }}:deliver"
    requires_approval_if: "input.n > 7"
output: "${{ steps.deliver.output }}"
"""


#: a run that hears the world: its render's result is called back, then it waits for the scanner's event
HEARING = """\
sealflow: 1
name: sim-hearing
version: 1
owner: team:sim
permissions: [sim:work]
budget: {max_steps: 30}
defaults: {timeout: 10m}
retry:
  again: {on: [timeout, unavailable], max_attempts: 2}
steps:
  - id: render
    action: sim.render
    with: {n: "${{ input.n }}"}
    permissions: [sim:work]
    retry: again
    callback: {timeout: 1h, schema: {type: object, required: [n], properties: {n: {type: integer}}}}
  - id: verdict
    wait:
      event: sim.scanned
      match: "event.data.n == input.n"
      schema: {type: object, required: [n, clean], properties: {clean: {type: boolean}}}
      timeout: 2h
    on_error:
      - {errors: [timeout], next: done}
  - id: done
    succeed: {}
"""


#: a run that calls another workflow (a child run): the callee works, then delivers under the child's key; the
#: caller's budget bounds both, and a cancelled caller undoes the callee's completed work
CALLEE = """\
sealflow: 1
name: sim-callee
version: 1
owner: team:sim
input:
  schema: {type: object, required: [n], properties: {n: {type: integer}}}
permissions: [sim:work, sim:deliver]
defaults: {timeout: 10m}
retry:
  flaky: {on: [unavailable, timeout], max_attempts: 3, backoff: {initial: 1s, factor: 2, max: 10s, jitter: full}}
steps:
  - id: prepare
    action: sim.work
    with: {n: "${{ input.n }}"}
    permissions: [sim:work]
    retry: flaky
    compensate: {action: sim.undo, with: {n: "${{ input.n }}"}}
  - id: hand_over
    action: sim.deliver
    with: {n: "${{ input.n }}"}
    permissions: [sim:deliver]
    idempotency_key: "${{ run.id }}:deliver"
    retry: flaky
output: "${{ steps.hand_over.output }}"
"""

CALLING = """\
sealflow: 1
name: sim-calling
version: 1
owner: team:sim
permissions: [sim:work, sim:deliver]
budget: {max_steps: 30, max_runtime: 8h}
defaults: {timeout: 10m}
steps:
  - id: handle
    call: {workflow: sim-callee, version: 1, input: {n: "${{ input.n }}"}}
  - id: done
    succeed: {}
"""


class Worked(TypedDict):
    n: int


class Delivered(TypedDict):
    delivered: int


class Sent(TypedDict):
    sent: bool
    n: int


class SimCrash(BaseException):
    """The simulated process died here (a BaseException: nothing in the engine may catch it as a failure)."""


class Violation(AssertionError):
    """An invariant did not hold; the message names the seed to replay."""


@dataclasses.dataclass
class Worker:
    """A simulated worker process: a real engine under its own owner id."""

    name: str
    engine: Engine
    alive: bool = True
    #: the fault drawn for the delivery in progress: (kind, point) or None
    fault: tuple[str, str] | None = None
    #: set by the action when the fault says the process dies now: every store write after raises SimCrash
    dead: bool = False
    #: a paused delivery: its thread, the event that resumes it, the event it set when it reached its pause
    paused: tuple[threading.Thread, threading.Event, threading.Event] | None = None
    #: what the paused delivery's thread ended with
    box: dict = dataclasses.field(default_factory=dict)


class FaultyStore:
    """The real store, as a worker sees it: dies with its worker (writes raise :class:`SimCrash` once the
    worker is dead) and fails the writes the fault of the delivery in progress names."""

    def __init__(self, store: Any, world: World, worker_name: str):
        self._store, self._world, self._name = store, world, worker_name

    def _me(self) -> Worker:
        return self._world.workers[self._name]

    def claim(self, *args, **kwargs):
        me = self._me()
        if me.dead:
            raise SimCrash("dead before the claim")
        if me.fault == ("store", "claim_error"):
            raise StoreUnavailable("simulated: the store refused the claim (connection lost)")
        claimed = self._store.claim(*args, **kwargs)
        if me.fault == ("crash", "after_claim"):
            me.dead = True
            raise SimCrash("died after the claim")
        return claimed

    def commit(self, commit, now):
        me = self._me()
        if me.dead:
            raise SimCrash("died before the commit")
        if me.fault == ("store", "commit_error") and self._world.commit_errors > 0:
            self._world.commit_errors -= 1
            raise StoreUnavailable("simulated: database or disk is full")
        return self._store.commit(commit, now)

    def append_audit(self, *args, **kwargs):
        if self._me().dead:
            raise SimCrash("dead")
        return self._store.append_audit(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def clock_for(seed: int) -> FakeClock:
    """The fake clock schedule ``seed`` runs on: open its store on it (``open_store(url, clock=clock_for(seed))``)."""
    return FakeClock(1_700_000_000.0 + (seed % 1000) * 86_400)


class World:
    """One schedule: the store, the control plane (submit, sweep, persons), workers, broker, receivers."""

    def __init__(self, store: Any, seed: int, *, tenant: str, plans: dict):
        self.seed, self.tenant, self.store = seed, tenant, store
        self.rng = random.Random(seed)
        random.seed(seed)  # attempt tokens
        self.clock = store.clock  # the schedule's clock, which its store was opened on (clock_for)
        assert isinstance(self.clock, FakeClock), "open the simulation's store on clock_for(seed)"
        self.trace: list[str] = []
        self.registry = Registry()
        self.config = RuntimeConfig.from_dict({"lost_attempts": LOST_ATTEMPTS, "outcome_unknown_timeout": "6h"})
        self._actions()
        self.plans = plans
        self.control = Runtime(store, self.registry, {}, clock=self.clock, rng=random.Random(seed + 1),
                               config=self.config, redeliver_after=REDELIVER_AFTER, worker_timeout_ms=20)
        self.control.send = self._sent  # messages a person's decision makes due go to the simulated broker
        self.broker: list[Message] = []
        self.workers: dict[str, Worker] = {}
        self.generation = 0
        for _ in range(3):
            self._spawn()
        self.runs: list[str] = []
        self.index: dict[str, int] = {}
        #: the key-honouring, fencing receiver of ``sim.deliver``: key -> the fence of the applied write
        self.applied: dict[str, int] = {}
        self.deliveries: Counter = Counter()
        self.stale_refused = 0
        #: the undo receiver (honours keys): compensation key -> its run
        self.undone: dict[str, str] = {}
        #: the SMS gateway (cannot deduplicate): run id -> messages sent
        self.sms: Counter = Counter()
        #: (run, step) -> the fences of its executions, in the order they started
        self.fences: dict[tuple[str, str], list[int]] = defaultdict(list)
        #: (run, step, try) -> how often its action started
        self.executions: Counter = Counter()
        self.reruns_of_completed: list[str] = []
        self.commit_errors = 0
        self.current: Worker | None = None
        #: the renderer's inbox: run -> the callback tokens it was given, in order
        self.tokens: dict[str, list[str]] = defaultdict(list)
        #: the scanner's verdicts sent: event id -> its data
        self.verdicts: dict[str, dict] = {}
        #: callback refusals by reason, and results accepted (run -> tokens completed)
        self.callback_refusals: Counter = Counter()
        self.called_back: dict[str, list[str]] = defaultdict(list)

    # -- the world's actions ----------------------------------------------------------------------
    def _actions(self) -> None:
        world = self

        @action("sim.work", permissions=["sim:work"], registry=self.registry)
        def work(ctx, n: int) -> Worked:
            me = world.enter(ctx)
            world.point(me, "before_effect")
            failure = world.rng_failure(me)
            if failure == "garbled":  # a result that breaks the declared output: invalid_output, not retried
                return {"m": n}  # type: ignore[typeddict-item]
            if failure:
                raise StepError(failure, f"simulated {failure}")
            world.point(me, "after_effect")
            return {"n": n}

        @action("sim.deliver", permissions=["sim:deliver"], effect="irreversible", registry=self.registry)
        def deliver(ctx, n: int) -> Delivered:
            me = world.enter(ctx)
            world.point(me, "before_effect")
            failure = world.rng_failure(me)
            if failure == "unavailable":  # refused before any effect
                raise StepError(failure, "simulated 503")
            world.receive(ctx.idempotency_key, ctx.fence)
            world.point(me, "after_effect")
            if failure == "timeout":  # the answer was lost after the effect: the retry finds it applied
                raise StepError("timeout", "simulated: no answer in time")
            if failure == "garbled":  # the effect happened, the answer breaks the declared output: recorded
                return {"delivred": n}  # type: ignore[typeddict-unknown-key]
            return {"delivered": n}

        @action("sim.undo", permissions=["sim:work"], effect="write", registry=self.registry)
        def undo(ctx, n):
            me = world.enter(ctx)
            world.point(me, "before_effect")
            if ctx.idempotency_key not in world.undone:  # the undo receiver honours its key
                world.undone[ctx.idempotency_key] = ctx.run_id
            world.point(me, "after_effect")
            return {"undone": n}

        @action("sim.render", permissions=["sim:work"], effect="write", registry=self.registry)
        def render(ctx, n: int) -> dict:
            me = world.enter(ctx)
            world.point(me, "before_effect")
            failure = world.rng_failure(me)
            if failure == "unavailable":
                raise StepError(failure, "simulated 503")
            world.tokens[ctx.run_id].append(ctx.callback.token)  # the renderer got the token
            world.point(me, "after_effect")
            return {"queued": n}

        @action("sim.sms", permissions=["sim:notify"], effect="irreversible", honours_idempotency_key=False,
                registry=self.registry)
        def sms(ctx, n: int) -> Sent:
            me = world.enter(ctx)
            world.point(me, "before_effect")
            if ctx.cancelled():  # a zombie (its lease is gone) does not send: the documented pattern
                raise StepError("cancelled", "replaced while paused")
            world.sms[ctx.run_id] += 1
            world.point(me, "after_effect")
            return {"sent": True, "n": n}

    def action_infos(self) -> dict[str, ActionInfo]:
        """What the compiler knows of the world's actions: what a project's actions give it (their schemas too)."""
        return {name: action_info(a) for name, a in self.registry.items()}

    def enter(self, ctx) -> Worker:
        """An action starts: note its fence, and whether its step had already succeeded (a completed step
        must never run again)."""
        me = self.current
        assert me is not None
        self.fences[(ctx.run_id, ctx.step_id)].append(ctx.fence)
        self.executions[(ctx.run_id, ctx.step_id, ctx.attempt)] += 1
        if any(a.step_id == ctx.step_id and a.state == "succeeded" for a in self.store.attempts(ctx.run_id)):
            self.reruns_of_completed.append(f"{ctx.run_id}/{ctx.step_id}")
        return me

    def point(self, me: Worker, name: str) -> None:
        """The action passes fault point ``name``: die here, or stall here, if the delivery's fault says so."""
        if me.fault == ("crash", name):
            me.dead = True
        elif me.fault == ("pause", name) and me.paused is not None:
            _, resume, reached = me.paused
            reached.set()
            resume.wait()

    def rng_failure(self, me: Worker) -> str | None:
        return me.fault[1] if me.fault is not None and me.fault[0] == "fail" else None

    def receive(self, key: str, fence: int) -> None:
        """The receiver of ``sim.deliver``: applies a key once; refuses a write fenced below one it saw."""
        self.deliveries[key] += 1
        seen = self.applied.get(key)
        if seen is not None and fence < seen:
            self.stale_refused += 1
            raise StepError("invalid_request", f"stale writer: fence {fence} < {seen}")
        if seen is None:
            self.applied[key] = fence
        else:
            self.applied[key] = max(seen, fence)

    # -- plumbing ---------------------------------------------------------------------------------
    def _spawn(self) -> Worker:
        self.generation += 1
        name = f"w{self.generation}"
        config = EngineConfig(f"sim:{self.seed}:{name}", settings=self.config)
        engine = Engine(FaultyStore(self.store, self, name), config, registry=self.registry, clock=self.clock,
                        rng=random.Random(self.seed * 31 + self.generation))
        worker = Worker(name, engine)
        self.workers[name] = worker
        return worker

    def _sent(self, message: Message, priority: str | None = None) -> None:
        self.broker.append(message)

    def _key(self, m: Message) -> tuple:
        return (self.index.get(m.run_id, -1), m.step_id, m.attempt, m.token)

    def note(self, text: str) -> None:
        self.trace.append(f"t={self.clock.now() - 1_700_000_000.0:.1f} {text}")

    def live(self) -> list[Worker]:
        return [w for w in self.workers.values() if w.alive and w.paused is None]

    # -- events -----------------------------------------------------------------------------------
    def submit(self) -> None:
        name = self.rng.choice(sorted(self.plans))
        n = self.rng.randrange(1, 12)
        run_id = self.control.submit(self.plans[name], {"n": n}, initiator="user:sim", tenant=self.tenant)
        self.index[run_id] = len(self.runs)
        self.runs.append(run_id)
        self.note(f"submit {name} n={n} -> run#{self.index[run_id]}")

    def dispatch(self) -> None:
        got = sorted(self.store.take_outbox(self.clock.now()), key=self._key)
        self.broker.extend(got)
        if got:
            self.note(f"dispatch {len(got)}")

    def sweep(self) -> None:
        report = self.control.sweeper.sweep()
        if report.leases_expired or report.timers_fired or report.redelivered or report.runs_timed_out:
            self.note(f"sweep expired={report.leases_expired} timers={report.timers_fired} "
                      f"redelivered={report.redelivered} timed_out={report.runs_timed_out}")

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.note(f"clock +{seconds:.1f}s")

    def draw_fault(self, chaos: bool) -> tuple[str, str] | None:
        if not chaos or self.rng.random() < 0.55:
            return None
        roll = self.rng.random()
        if roll < 0.12:
            return ("fail", self.rng.choice(("unavailable", "timeout", "unavailable", "timeout", "garbled")))
        point = self.rng.choice(POINTS)
        if point in ("commit_error", "claim_error"):
            self.commit_errors = self.rng.choice((1, 2, 4, 12, 40, 1000))  # 1000: past the lease, it gives up
            return ("store", point)
        if point == "pause":
            return ("pause", self.rng.choice(("before_effect", "after_effect")))
        return ("crash", point)

    def deliver(self, *, chaos: bool) -> None:
        workers = self.live()
        if not self.broker or not workers:
            return
        self.broker.sort(key=self._key)
        i = self.rng.randrange(len(self.broker)) if chaos else 0  # reordered
        message = self.broker[i]
        if chaos and self.rng.random() < 0.1:
            self.note(f"duplicate run#{self.index.get(message.run_id)} {message.step_id}/{message.attempt}")
        else:
            del self.broker[i]
        worker = self.rng.choice(workers)
        fault = self.draw_fault(chaos)
        label = f"deliver run#{self.index.get(message.run_id)} {message.step_id}/{message.attempt} to {worker.name}"
        self.note(label + (f" fault={fault}" if fault else ""))
        if fault == ("crash", "before_claim"):
            self.die(worker)
            return
        if fault is not None and fault[0] == "pause":
            self._pause(worker, message, fault)
            return
        self._handle(worker, message, fault, carry=chaos and self.rng.random() < 0.5)

    def _handle(self, worker: Worker, message: Message, fault, *, carry: bool) -> None:
        worker.fault, worker.dead = fault, False
        self.current = worker
        try:
            claimed = None
            for _ in range(8):
                got = worker.engine.handle(*message, carry=carry, claimed=claimed)
                due, claimed = got.messages, got.claimed
                if fault == ("crash", "after_commit"):
                    self.broker.append(message)  # never acknowledged: the broker delivers it again
                    self.die(worker)
                    return
                if carry and len(due) == 1 and due[0].run_id == message.run_id:
                    message = due[0]  # carried on: already claimed for this worker by the commit (claimed)
                    continue
                self.broker.extend(sorted(due, key=self._key))
                return
            self.broker.append(message)
        except SimCrash:
            self.die(worker)
        except StoreUnavailable as exc:  # the worker logs it and lives; the message is gone, the sweeper redoes
            self.note(f"{worker.name}: {exc}")
        finally:
            worker.fault = None
            self.current = None

    def _pause(self, worker: Worker, message: Message, fault) -> None:
        resume, reached = threading.Event(), threading.Event()
        worker.fault, worker.dead = fault, False
        self.current = worker
        box: dict = {}

        def run() -> None:
            try:
                box["due"] = worker.engine.handle(*message).messages
            except SimCrash:
                box["crash"] = True
            except StoreUnavailable:
                box["due"] = ()
            except BaseException as exc:  # noqa: BLE001 - reported by resume()
                box["error"] = exc

        thread = threading.Thread(target=run, daemon=True)
        worker.paused, worker.box = (thread, resume, reached), box
        thread.start()
        while not reached.wait(0.01):  # until it stalls at its point (or never gets there: it ended)
            if not thread.is_alive():
                break
        self.current = None
        if not thread.is_alive():  # it did not reach the point (refused, replayed): it simply ended
            self._resumed(worker)

    def resume(self, worker: Worker) -> None:
        assert worker.paused is not None
        thread, resume, _ = worker.paused
        self.note(f"resume {worker.name}")
        self.current = worker
        resume.set()
        thread.join(120)
        if thread.is_alive():
            raise Violation(f"seed {self.seed}: a resumed worker never finished its attempt")
        self._resumed(worker)

    def _resumed(self, worker: Worker) -> None:
        box = worker.box
        worker.paused, worker.fault, self.current = None, None, None
        if "error" in box:
            raise box["error"]
        if box.get("crash"):
            self.die(worker)
            return
        self.broker.extend(sorted(box.get("due", ()), key=self._key))

    def die(self, worker: Worker) -> None:
        worker.alive = False
        self.note(f"{worker.name} died")
        if self.rng.random() < 0.5:  # a recovery on its host sees its process gone at once
            ended = self.store.expire_leases(worker.engine.owner, self.clock.now(), "its process no longer exists")
            if ended:
                self.note(f"recovery ended {ended} lease(s) of {worker.name}")
        self._spawn()

    def cancel(self, run_id: str) -> None:
        """The run's initiator cancels it (a run already ended is refused, nothing changed)."""
        try:
            self.control.cancel(run_id, actor="user:sim", reason="changed my mind")
            self.note(f"cancel run#{self.index[run_id]}")
        except InvalidOperation as exc:
            self.note(f"cancel refused: {exc}")

    def persons(self, *, chaos: bool) -> None:
        """A person answers one thing that waits for a person."""
        for run_id in self.runs:
            status = self.control.status(run_id)
            waiting = status.waiting or {}
            if status.run.state != "waiting" or waiting.get("kind") not in ("approval", "outcome_unknown"):
                continue
            if chaos and self.rng.random() < 0.5:
                continue
            try:
                if waiting["kind"] == "approval":
                    if self.rng.random() < 0.85:
                        self.control.approve(run_id, actor="user:boss")
                        self.note(f"approve run#{self.index[run_id]}")
                    else:
                        self.control.reject(run_id, actor="user:boss", reason="no")
                        self.note(f"reject run#{self.index[run_id]}")
                else:  # looks at the gateway, as a person would, then decides
                    if self.sms[run_id] and chaos and self.rng.random() < 0.5:
                        self.typo(run_id)  # a person's typo first: refused, nothing changed
                    if self.sms[run_id]:
                        self.control.resolve(run_id, "succeeded", actor="user:ops", reason="the gateway sent it",
                                             output={"sent": True, "n": status.run.input["n"]})
                        self.note(f"resolve run#{self.index[run_id]} succeeded")
                    else:
                        choice = "retry" if self.rng.random() < 0.8 else "failed"
                        self.control.resolve(run_id, choice, actor="user:ops", reason="the gateway shows nothing")
                        self.note(f"resolve run#{self.index[run_id]} {choice}")
            except InvalidOperation as exc:  # it moved on meanwhile (a timer): nothing changed
                self.note(f"person refused: {exc}")
            return

    def outside(self, *, chaos: bool) -> None:
        """The world outside answers one run that hears it: the renderer calls back (or an impostor tries a forged
        or a stale token), or the scanner sends its verdict (for this run, another, again, or before it waits)."""
        hearing = [r for r in self.runs if self.plan_name(r) == "sim-hearing"
                   and self.store.get_run(r).state not in states.RUN_FINAL]
        if not hearing:
            return
        run_id = self.rng.choice(hearing)
        n = self.store.get_run(run_id).input["n"]
        active = self.store.active_attempt(run_id)
        tokens = self.tokens.get(run_id) or []
        roll = self.rng.random() if chaos else 0.0
        if active is not None and active.state == "waiting" and "callback" in active.data and tokens:
            token = tokens[-1]
            if roll > 0.8:
                token = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")  # an impostor
            elif roll > 0.65 and len(tokens) > 1:
                token = tokens[0]  # a stale attempt's
            try:
                self.control.complete_callback(token, data={"n": n})
                self.called_back[run_id].append(token)
                self.note(f"callback run#{self.index[run_id]} completed")
            except CallbackRefused as exc:
                self.callback_refusals[exc.reason] += 1
                self.note(f"callback run#{self.index[run_id]} refused: {exc.reason}")
            return
        if chaos and roll > 0.7 and self.verdicts:  # a delivery repeated
            event_id = self.rng.choice(sorted(self.verdicts))
            data = self.verdicts[event_id]
        else:
            event_id = f"scan-{len(self.verdicts)}"
            data = {"n": n if roll < 0.75 else (n % 11) + 1, "clean": roll < 0.5}
            if chaos and roll > 0.9:
                data = {"n": n}  # a verdict missing its field: the wait refuses it
            self.verdicts[event_id] = data
        offered = self.control.offer_event(self.tenant, "scanner", event_id, "sim.scanned", data)
        self.note(f"verdict {event_id} n={data['n']} -> {[(o.run_id[-6:], o.result) for o in offered]}")

    def plan_name(self, run_id: str) -> str:
        digest = self.store.get_run(run_id).plan_digest
        return next(p.name for p in self.plans.values() if p.digest == digest)

    def typo(self, run_id: str) -> None:
        """A person marks the lost SMS succeeded with an output its action's declaration refuses (a typo): it must
        be refused and change nothing."""
        before = self.store.get_run(run_id).state
        try:
            self.control.resolve(run_id, "succeeded", actor="user:ops", reason="typo", output={"snet": True})
        except InvalidOperation:
            self.note(f"resolve run#{self.index[run_id]} with a mistyped output: refused")
            if self.store.get_run(run_id).state != before:
                raise Violation(f"seed {self.seed}: a refused decision changed run#{self.index[run_id]}\n"
                                + self.tail()) from None
            return
        raise Violation(f"seed {self.seed}: an output breaking sim.sms's declared output was taken for "
                        f"run#{self.index[run_id]}\n" + self.tail())

    # -- a whole schedule -------------------------------------------------------------------------
    def chaos(self, events: int = CHAOS_EVENTS) -> None:
        for _ in range(self.rng.randrange(1, 4)):
            self.submit()
        for _ in range(events):
            roll = self.rng.random()
            paused = [w for w in self.workers.values() if w.paused is not None]
            if roll < 0.04 and len(self.runs) < 6:
                self.submit()
            elif roll < 0.16:
                self.dispatch()
            elif roll < 0.50:
                self.deliver(chaos=True)
            elif roll < 0.58:
                self.sweep()
            elif roll < 0.70:
                self.advance(self.rng.choice((0.5, 2.0, 5.0)))
            elif roll < 0.76:
                self.advance(self.rng.choice((REDELIVER_AFTER + 1, TIMEOUT_S + 10, TIMEOUT_S * 2)))
            elif roll < 0.78:
                self.advance(self.rng.choice((3600.0, 7300.0)))
            elif roll < 0.79:  # the host's clock stepped back (NTP): leases and timers are measured on it
                back = self.rng.choice((0.5, 2.0, 5.0))
                self.clock._now -= back
                self.note(f"clock -{back:.1f}s")
            elif roll < 0.84 and paused:
                self.resume(self.rng.choice(paused))
            elif roll < 0.87:
                self.persons(chaos=True)
            elif roll < 0.896:
                self.outside(chaos=True)
            elif roll < 0.90 and self.runs:
                self.cancel(self.rng.choice(self.runs))
            elif roll < 0.93:
                alive = [w for w in self.workers.values() if w.alive and w.paused is None]
                if len(alive) > 1:
                    self.die(self.rng.choice(alive))
            else:
                self.deliver(chaos=True)

    def heal(self) -> None:
        """No more faults: resume the paused, then drive everything until every run has ended."""
        for worker in [w for w in self.workers.values() if w.paused is not None]:
            self.resume(worker)
        for _ in range(HEAL_ROUNDS):
            self.dispatch()
            while self.broker:
                self.deliver(chaos=False)
                self.dispatch()
            self.persons(chaos=False)
            self.outside(chaos=False)
            if all(self.store.get_run(r).state in states.RUN_FINAL for r in self.runs):
                return
            self.sweep()
            if not self.broker:
                dues = [self.store.next_due(r, redeliver_after=REDELIVER_AFTER) for r in self.runs]
                dues = [d for d in dues if d is not None]
                self.advance(max(1.0, min(dues) - self.clock.now() + 0.01) if dues else REDELIVER_AFTER + 1)
        left = {f"run#{self.index[r]}": self.store.get_run(r).state for r in self.runs
                if self.store.get_run(r).state not in states.RUN_FINAL}
        raise Violation(f"seed {self.seed}: runs never ended after {HEAL_ROUNDS} rounds of healing: {left}\n"
                        + self.tail())

    def tail(self, n: int = 40) -> str:
        return "trace (last events):\n  " + "\n  ".join(self.trace[-n:])

    def close(self) -> None:
        for worker in self.workers.values():
            if worker.paused is not None:
                worker.paused[1].set()
                worker.paused[0].join(5)
            worker.engine.services.runner.close()
        self.control.close(grace=0.1)


def check(world: World) -> dict:
    """The invariants of a healed schedule; a :class:`Violation` for the first that fails. Returns counts."""
    store, seed = world.store, world.seed
    problems: list[str] = []
    plans = {p.digest: p for p in world.plans.values()}
    finals = Counter()
    for run_id in world.runs:
        run = store.get_run(run_id)
        label = f"run#{world.index[run_id]}"
        finals[run.state] += 1
        attempts = store.attempts(run_id)
        plan = plans[run.plan_digest]
        # every run ends in a declared state, for a reason the world can cause
        if run.state not in states.RUN_FINAL:
            problems.append(f"{label} is {run.state}, not final")
        if run.state == "quarantined" and "poison:" not in (run.error_message or ""):  # (a compensation's too)
            problems.append(f"{label} quarantined for another reason than poison: {run.error_message}")
        if any((a.error_message or "").startswith("stale writer") for a in attempts):
            problems.append(f"{label}: a current execution was refused as a stale writer (its fence was not the "
                            "largest)")
        # a lost attempt never fails a run on its own: only a person's "failed", or nobody deciding in time
        if run.state == "failed" and run.error_class == "worker_lost" and not (
                "judged the lost attempt failed" in (run.error_message or "")
                or "nobody decided" in (run.error_message or "")):
            problems.append(f"{label} failed for a lost attempt: {run.error_message}")
        if any(a.error_class == "internal" for a in attempts):
            problems.append(f"{label} has an attempt failed as internal (an engine bug): "
                            f"{[a.error_message for a in attempts if a.error_class == 'internal']}")
        # attempts and lost attempts never exceed their bounds; budgets hold
        for step in plan.steps:
            mine = [a for a in attempts if a.step_id == step.id]
            tries = {a.try_no for a in mine}
            if tries and max(tries) > max(step.retry.max_attempts, 1):
                problems.append(f"{label} step {step.id} ran try {max(tries)} > max_attempts {step.retry.max_attempts}")
            for try_no in tries:  # a try runs its code at most lost_attempts times (then it is poison)
                ran = world.executions[(run_id, step.id, try_no)]
                if ran > LOST_ATTEMPTS:
                    problems.append(f"{label} step {step.id} try {try_no} ran {ran} times > lost_attempts "
                                    f"{LOST_ATTEMPTS}")
        if plan.budget.max_steps is not None and run.steps_executed > plan.budget.max_steps:
            problems.append(f"{label} executed {run.steps_executed} steps > max_steps {plan.budget.max_steps}")
        # every key's effect applied at the receiver once, and a completed run's applied
        if run.state == "completed" and plan.name == "sim-pipeline" and f"{run_id}:deliver" not in world.applied:
            problems.append(f"{label} completed without its delivery applied")
        # completed steps are undone when the run does not complete (and only then), each undo once at its target
        fetched = any(a.step_id == "fetch" and a.state == "succeeded" for a in attempts)
        undone = f"{run_id}:fetch:compensate" in world.undone
        if plan.name == "sim-gated" and run.state == "completed" and undone:
            problems.append(f"{label} completed, yet its fetch was undone")
        if plan.name == "sim-gated" and run.state in ("failed", "cancelled") and fetched and not undone:
            problems.append(f"{label} ended {run.state} with its fetch done and not undone")
        # an SMS (no deduplication) sent at most once: never again on the engine's own say
        if world.sms[run_id] > 1:
            problems.append(f"{label} sent its SMS {world.sms[run_id]} times")
        # no waiting gate left behind
        if any(OUTCOME_UNKNOWN in (a.data or {}) and a.state == "waiting" for a in attempts):
            problems.append(f"{label} left an outcome-unknown gate waiting")
        # what the world said is heard once, and as it was said
        if plan.name == "sim-hearing":
            tokens = world.called_back.get(run_id, [])
            if len(tokens) != len(set(tokens)):
                problems.append(f"{label}: a callback token completed its step twice")
            taken = [e for e in store.audit(run_id) if e.event == "event.taken"]
            if len(taken) > 1:
                problems.append(f"{label}: {len(taken)} events taken by one wait")
            for e in taken:
                data = world.verdicts.get(e.detail["event"]["id"]) or {}
                if data.get("n") != run.input["n"] or "clean" not in data:
                    problems.append(f"{label} took event {e.detail['event']['id']} ({data}), which its match or "
                                    "schema refuses")
            verdict = [a for a in attempts if a.step_id == "verdict" and a.state == "succeeded"]
            if verdict and verdict[-1].output.get("n") != run.input["n"]:
                problems.append(f"{label}: its verdict step's output is another run's: {verdict[-1].output}")
        # a called workflow's run: one child per call attempt, each ended; a completed caller's child completed
        # with its hand-over applied once (under the child's key); a child's completed work undone unless it completed
        if plan.name == "sim-calling":
            kids = store.children(run_id)
            for kid in kids:
                if kid.state not in states.RUN_FINAL:
                    problems.append(f"{label}: its called run {kid.id} is {kid.state} after the caller ended")
                prepared = any(a.step_id == "prepare" and a.state == "succeeded" for a in store.attempts(kid.id))
                if kid.state in ("failed", "cancelled") and prepared and f"{kid.id}:prepare:compensate" not in \
                        world.undone:
                    problems.append(f"{label}: its called run {kid.id} ended {kid.state} with its work not undone")
            if run.state == "completed" and not any(k.state == "completed" and f"{k.id}:deliver" in world.applied
                                                    for k in kids):
                problems.append(f"{label} completed without a completed called run whose hand-over was applied")
    if set(world.callback_refusals) - {"forged", "superseded", "expired"}:
        problems.append(f"callbacks refused for an unexpected reason: {dict(world.callback_refusals)}")
    if world.reruns_of_completed:
        problems.append(f"completed steps ran again: {world.reruns_of_completed[:5]}")
    # a step's executions are fenced in the order they started
    for (run_id, step_id), fences in world.fences.items():
        if any(b <= a for a, b in zip(fences, fences[1:], strict=False)):
            problems.append(f"run#{world.index.get(run_id)} step {step_id}: fences not increasing: {fences}")
    illegal = [e for r in world.runs for e in store.audit(r) if e.event == "illegal_transition"]
    if illegal:
        problems.append(f"{len(illegal)} illegal transitions, e.g. {illegal[0].detail}")
    chain = auditverify.verify(store, world.tenant)
    if not chain.ok:
        problems.append(f"the audit chain does not verify: {chain.first}")
    if problems:
        raise Violation(f"seed {seed}: " + "; ".join(problems) + "\n" + world.tail())
    return {"runs": len(world.runs), **{f"runs_{k}": v for k, v in finals.items()},
            "deliveries": sum(world.deliveries.values()), "stale_refused": world.stale_refused,
            "called_back": sum(len(t) for t in world.called_back.values()),
            "callbacks_refused": sum(world.callback_refusals.values()),
            "events_taken": sum(1 for r in world.runs for e in store.audit(r) if e.event == "event.taken"),
            "events": len(world.trace)}


def compile_plans(world_registry_infos: dict) -> dict:
    plans = {name: compile_bytes(text.encode(), f"<{name}>", actions=world_registry_infos)
             for name, text in (("pipeline", PIPELINE), ("gated", GATED), ("hearing", HEARING))}
    with tempfile.TemporaryDirectory() as folder:  # a call finds its callee beside it
        (Path(folder) / "sim-callee.v1.yaml").write_text(CALLEE)
        (Path(folder) / "sim-calling.v1.yaml").write_text(CALLING)
        plans["calling"] = compile_file(Path(folder) / "sim-calling.v1.yaml", actions=world_registry_infos)
    return plans


def run_schedule(store: Any, seed: int, *, tenant: str, plans: dict | None = None) -> tuple[dict, list[str]]:
    """Run schedule ``seed`` on ``store`` (its runs in ``tenant``); return the invariants' counts and the trace."""
    quiet = logging.getLogger("sealflow")
    level, quiet.level = quiet.level, logging.CRITICAL  # the faults make the engine log; the trace says it
    world = World(store, seed, tenant=tenant, plans=plans or {})
    try:
        if plans is None:
            world.plans = compile_plans(world.action_infos())
        world.chaos()
        world.heal()
        return check(world), world.trace
    finally:
        world.close()
        quiet.level = level
