"""The chaos suite on many hosts on one machine: every ``sealflow worker`` in a network namespace of its own, the
test's private PostgreSQL, Redis and effect receiver in another (tests/chaos/hosts.py), and partitions cut
mid-step between them.

Given three workers (2 threads each) on hosts of their own, each reaching the store, the broker and the
receiver over a link of its own, when runs of the chaos workflow (two effects each) go on while

* **zombie rounds**: one worker is made to hold an effect step before its POST (a file the test controls), then
  partitioned from PostgreSQL and Redis (or from PostgreSQL alone, every other round) until the others have
  taken its attempt over (its store heartbeat silent for 15 s: the attempt's token changes), healed, and its
  step let go: it delivers its effect late and tries to commit its result;
* **partitions**: every 2-5 s another worker is cut from PostgreSQL, from Redis or from both for 1-6 s, mid-step
  (seeded; the seed is printed),

then no run is lost and every run completes, every effect is applied exactly once at the receiver (the zombie's
late delivery is a duplicate, suppressed by its idempotency key), every zombie's late commit was refused by its
fence (an audit ``commit_fenced`` event with the zombie's token; the loss counted on its attempt, ``leases_lost``;
the step's one success committed under another token: another execution's), no step has two successful
attempts, every worker stops cleanly and the audit chain verifies. It prints the counts, also under ``-q``.

The workflow's retry class is the test's parameter: with one (``retry-class``, the chaos workflow's) and without
(``no-retry-class``, ``max_attempts: 1``): a lost attempt runs again without consuming ``max_attempts``
(docs/runtime.md, *When a worker dies*), so both must hold.

Size: 12 runs in the default suite, 120 with ``-m chaos``, any with ``SEALFLOW_CHAOS_RUNS=N`` (conftest.py); a
zombie round per 40 runs (at least one). ``SEALFLOW_CHAOS_SEED`` replays a seed's partition schedule. Needs root
and ``ip netns`` (a skip with the reason otherwise, a failure under ``SEALFLOW_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from chaos_receiver import Receiver
from hosts import Hosts, netns_or_skip
from private_services import PrivatePostgres, PrivateRedis, stop_all
from test_chaos import ACTIONS, EFFECTS, FINAL, WORKFLOW, Database, Submitter

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 3
THREADS = 2
#: the retry class of the workflow's defaults in the ``retry-class`` case (the chaos workflow's)
RETRY_CLASS = {"on": ["timeout", "network"], "max_attempts": 20, "backoff": {"initial": "0s"}}
#: longer than a zombie round takes (held, cut, taken over after 15 s of heartbeat silence, healed, let go),
#: so that the zombie's late result is its action's, not its own timeout's
STEP_TIMEOUT = "30s"
#: the workers' --redeliver-after: a message sent into a cut link and lost is sent again after this long
REDELIVER_AFTER_S = 10
CUT_EVERY = (2.0, 5.0)  # seconds between two partitions of a non-zombie worker, uniform
CUT_FOR = (1.0, 6.0)  # how long such a partition lasts, uniform
CUTS = (("db",), ("mq",), ("db", "mq"))
#: the links a zombie round cuts, round after round
ZOMBIE_CUTS = (("db", "mq"), ("db",))
RUNS_PER_ZOMBIE = 40
SUBMIT_WINDOW_S = 15.0
#: no run ended, and no zombie round moved, for this long: stuck
STALL_S = 120.0
#: the longest a zombie round may wait for each of its stages (a step to hold, the takeover, the fenced commit)
ROUND_STAGE_S = 90.0


def workflow(tmp: Path, retry: dict | None) -> Path:
    """The chaos workflow with ``retry`` as its defaults' retry class (None: none) and :data:`STEP_TIMEOUT`."""
    definition = yaml.safe_load(WORKFLOW.read_text())
    definition["defaults"] = {"timeout": STEP_TIMEOUT, **({"retry": retry} if retry is not None else {})}
    (tmp / "workflow").mkdir()
    path = tmp / "workflow" / WORKFLOW.name  # (a definition's file is named after its name and version)
    path.write_text(json.dumps(definition, indent=1))
    return path


class HostWorkers:
    """One ``sealflow worker`` per host namespace, each reaching the services over its own links."""

    def __init__(self, tmp: Path, hosts: Hosts, pg: PrivatePostgres, redis: PrivateRedis, receiver: Receiver):
        self.tmp, self.hosts = tmp, hosts
        self.policy = tmp / "access.yaml"
        self.policy.write_text('{"tenants": {"default": {"roles": {"chaos": ["chaos:work", "chaos:deliver"]}, '
                               '"members": {"user:chaos": ["chaos"]}}}}')
        self.procs: dict[int, subprocess.Popen] = {}
        self.argv: dict[int, list[str]] = {}
        self.env: dict[int, dict[str, str]] = {}
        base = {k: v for k, v in os.environ.items() if not k.startswith("SEALFLOW_") or k == "SEALFLOW_DEMO_DB"}
        for i in range(WORKERS):
            (tmp / f"hold{i}").mkdir()
            self.argv[i] = hosts.exec_argv(hosts.hosts[i], [
                sys.executable, "-m", "sealflow", "worker",
                "--broker", f"redis://{hosts.address(i, 'mq')}:{redis.port}/0",
                "--store", f"postgresql://postgres@{hosts.address(i, 'db')}:{pg.port}/postgres",
                "--actions", str(ACTIONS), "--access", str(self.policy), "--allow-unsigned", "--queue", "chaos",
                "--threads", str(THREADS), "--redeliver-after", str(REDELIVER_AFTER_S)])
            self.env[i] = {**base, "PYTHONPATH": str(ROOT), "CHAOS_HOLD": str(tmp / f"hold{i}"),
                           "CHAOS_RECEIVER": f"http://{hosts.address(i, 'fx')}:{receiver.port}/effects"}

    def start(self, slot: int) -> None:
        with open(self.tmp / f"worker{slot}.out", "w") as out, open(self.tmp / f"worker{slot}.err", "w") as err:
            self.procs[slot] = subprocess.Popen(self.argv[slot], cwd=ROOT, env=self.env[slot], stdout=out, stderr=err)

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        for slot, proc in self.procs.items():
            while "worker ready:" not in (self.tmp / f"worker{slot}.out").read_text():
                assert proc.poll() is None, f"worker {slot} exited {proc.returncode}: {self.log(slot)}"
                assert time.monotonic() < deadline, f"worker {slot} never said it was ready: {self.log(slot)}"
                time.sleep(0.1)

    def slot_of(self, owner: str | None) -> int | None:
        """The slot of a lease owner (``host:pid:random``; ``ip netns exec`` execs, so the pid is the worker's)."""
        parts = (owner or "").split(":")
        pid = int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else None
        return next((slot for slot, p in self.procs.items() if p.pid == pid), None)

    def log(self, slot: int, tail: int = 3000) -> str:
        return (self.tmp / f"worker{slot}.err").read_text()[-tail:]

    def exited(self) -> dict[int, int]:
        return {slot: p.returncode for slot, p in self.procs.items() if p.poll() is not None}

    def stop(self) -> dict[int, int]:
        return stop_all(self.procs)


class ZombieRound:
    """Hold an effect step of worker ``slot``, cut its ``links``, wait until its attempt is taken over, heal, let
    the step go, and wait for its late commit to be fenced off (a stage each time :meth:`advance` is called)."""

    def __init__(self, workers: HostWorkers, db: Database, slot: int, links: tuple[str, ...]):
        self.workers, self.db, self.slot, self.links = workers, db, slot, links
        self.folder = workers.tmp / f"hold{slot}"
        self.stage, self.since = "armed", time.monotonic()
        self.held: dict = {}
        self.attempt: int | None = None
        self.token: int | None = None
        self.fenced: dict | None = None
        (self.folder / "held").unlink(missing_ok=True)
        (self.folder / "hold").write_text("hold")

    def _to(self, stage: str) -> None:
        self.stage, self.since = stage, time.monotonic()

    def disarm(self) -> None:
        """No step to hold came (the runs ended first): nothing was held, nothing to undo but the file."""
        (self.folder / "hold").unlink(missing_ok=True)
        self._to("disarmed")

    def advance(self) -> None:
        hosts = self.workers.hosts
        if self.stage == "armed":
            held = self.folder / "held"
            text = held.read_text() if held.exists() else ""
            if not text.endswith("}"):
                return
            self.held = json.loads(text)
            rows = self.db.rows("SELECT attempt, token, lease_owner FROM attempts WHERE run_id = %s AND step_id = %s "
                                "AND state = 'running'", self.held["run"], self.held["step"])
            if not rows:
                return  # (the store still reads the claim's commit; or it is unreachable for a moment)
            (self.attempt, self.token, owner), = rows
            assert self.workers.slot_of(owner) == self.slot, (owner, self.slot, self.held)
            for link in self.links:
                hosts.cut(self.slot, link)
            self._to("cut")
        elif self.stage == "cut":
            rows = self.db.rows("SELECT token FROM attempts WHERE run_id = %s AND step_id = %s AND attempt = %s",
                                self.held["run"], self.held["step"], self.attempt)
            if rows and rows[0][0] != self.token:  # taken over: the lease ended, the attempt has a new token
                for link in self.links:
                    hosts.heal(self.slot, link)
                (self.folder / "hold").unlink()
                self._to("released")
        elif self.stage == "released":
            rows = self.db.rows("SELECT detail FROM audit WHERE event = 'commit_fenced' AND run_id = %s AND "
                                "step_id = %s", self.held["run"], self.held["step"]) or []
            for (detail,) in rows:
                fenced = json.loads(detail) if isinstance(detail, str) else detail
                if fenced.get("token") == self.token:
                    self.fenced = fenced
                    self._to("fenced")
        assert self.stage in ("fenced", "disarmed") or time.monotonic() - self.since < ROUND_STAGE_S, (
            f"zombie round of worker {self.slot} stuck {ROUND_STAGE_S:.0f} s at {self.stage!r}: held {self.held}, "
            f"attempt {self.attempt}, token {self.token}\n{self.workers.log(self.slot)}")

    @property
    def done(self) -> bool:
        return self.stage in ("fenced", "disarmed")


def _diagnosis(db: Database, workers: HostWorkers) -> str:
    stuck = db.rows("SELECT r.id, r.state, a.step_id, a.attempt, a.state, a.error_class, a.lease_owner, "
                    "(SELECT count(*) FROM outbox o WHERE o.run_id = r.id AND o.sent_at IS NULL) "
                    "FROM runs r LEFT JOIN attempts a ON a.run_id = r.id AND a.seq = (SELECT max(seq) FROM "
                    "attempts WHERE run_id = r.id) WHERE r.state <> 'completed' ORDER BY r.id LIMIT 20")
    logs = "\n".join(f"--- worker {slot} ---\n{workers.log(slot, 1500)}" for slot in workers.procs)
    return (f"runs not completed (run, state, last step, attempt, its state, class, lease owner, unsent "
            f"outbox rows): {stuck}\n{logs}")


@pytest.fixture
def hosts():
    netns_or_skip()
    lab = Hosts(WORKERS)
    yield lab
    lab.close()


@pytest.mark.chaos
@pytest.mark.parametrize("retry", [
    pytest.param(RETRY_CLASS, id="retry-class"), pytest.param(None, id="no-retry-class")])
def test_given_workers_on_hosts_of_their_own_when_partitioned_mid_step_then_no_run_is_lost_and_zombies_are_fenced(
        tmp_path, hosts, retry, hosts_chaos_size, chaos_report):
    n = hosts_chaos_size
    seed = int(os.environ.get("SEALFLOW_CHAOS_SEED") or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)
    print(f"chaos (hosts): seed {seed} (SEALFLOW_CHAOS_SEED={seed} replays its partitions), {n} runs", flush=True)
    # Given the test's own PostgreSQL, Redis and receiver in its services namespace, and three workers on hosts
    pg = PrivatePostgres(netns=hosts.services, listen=tuple(hosts.addresses("db")))
    redis = PrivateRedis(tmp_path, netns=hosts.services, listen=tuple(hosts.addresses("mq")))
    receiver = hosts.inside(hosts.services, lambda: Receiver(host="0.0.0.0"))
    db = Database(pg.socket_url)
    workers = HostWorkers(tmp_path, hosts, pg, redis, receiver)
    try:
        from sealflow.store import migrate_store

        migrate_store(pg.socket_url)
        for slot in range(WORKERS):
            workers.start(slot)
        workers.wait_ready()
        # When runs go on, a zombie round per 40 runs and partitions of the other workers every 2-5 s, mid-step
        began = time.monotonic()
        submitter = Submitter(pg.socket_url, workers.policy, n, window=max(SUBMIT_WINDOW_S, n * 0.25),
                              workflow=workflow(tmp_path, retry))
        submitter.start()
        rounds_wanted = max(1, n // RUNS_PER_ZOMBIE)
        rounds: list[ZombieRound] = [ZombieRound(workers, db, 0, ZOMBIE_CUTS[0])]
        cuts: Counter = Counter()
        healing: dict[int, float] = {}  # slot -> when its partition heals
        next_cut = time.monotonic() + rng.uniform(*CUT_EVERY)
        done, moved = -1, time.monotonic()
        while True:
            states = db.rows("SELECT state, count(*) FROM runs GROUP BY state")
            if states is not None:
                ended = {state: count for state, count in states if state in FINAL}
                assert set(ended) <= {"completed"}, f"seed {seed}: runs ended {ended}\n" + _diagnosis(db, workers)
                if sum(ended.values()) != done:
                    done, moved = sum(ended.values()), time.monotonic()
                round_ = rounds[-1]
                stage = round_.stage
                round_.advance()
                if round_.stage != stage:
                    moved = time.monotonic()
                if round_.stage == "armed" and done >= n and submitter.finished:
                    round_.disarm()
                elif round_.done and len(rounds) < rounds_wanted and done < n - 4:
                    slot = len(rounds) % WORKERS
                    rounds.append(ZombieRound(workers, db, slot, ZOMBIE_CUTS[len(rounds) % len(ZOMBIE_CUTS)]))
                if done >= n and submitter.finished and rounds[-1].done:
                    break
            assert submitter.error is None, f"seed {seed}: submitting failed: {submitter.error!r}"
            assert not workers.exited(), f"a worker exited on its own: {workers.exited()}\n" + \
                _diagnosis(db, workers)
            assert time.monotonic() - moved < STALL_S, \
                f"seed {seed}: no run ended for {STALL_S:.0f} s ({done}/{n} ended)\n" + _diagnosis(db, workers)
            now = time.monotonic()
            for slot, until in list(healing.items()):
                if now >= until:
                    for link in ("db", "mq"):
                        if (slot, link) in hosts.cut_links:
                            hosts.heal(slot, link)
                    del healing[slot]
            zombie = rounds[-1].slot if rounds[-1].stage in ("armed", "cut") else None
            if now >= next_cut and not healing:
                slot = rng.choice([s for s in range(WORKERS) if s != zombie])
                links = rng.choice(CUTS)
                for link in links:
                    hosts.cut(slot, link)
                cuts["+".join(links)] += 1
                healing[slot] = now + rng.uniform(*CUT_FOR)
                next_cut = now + rng.uniform(*CUT_EVERY)
            time.sleep(0.1)
        wall = time.monotonic() - began
        hosts.heal_all()
        codes = workers.stop()
        assert submitter.error is None, f"seed {seed}: submitting failed: {submitter.error!r}"
        run_ids = submitter.run_ids
        states = dict(db.rows("SELECT id, state FROM runs") or [])
        applied = receiver.applied_per_effect()

        def one(sql: str, *args):
            return (db.rows(sql, *args) or [(None,)])[0][0]

        attempts = one("SELECT count(*) FROM attempts")
        lost = one("SELECT coalesce(sum(leases_lost), 0) FROM attempts")
        fenced_events = one("SELECT count(*) FROM audit WHERE event = 'commit_fenced'")
        twice = db.rows("SELECT run_id, step_id, count(*) FROM attempts WHERE state = 'succeeded' "
                        "GROUP BY run_id, step_id HAVING count(*) > 1")
        slowest = one("SELECT max(updated_at - created_at) FROM runs") or 0.0
        requeued = sum(workers.log(slot, 10**9).count("requeued them") for slot in workers.procs)
        zombies = [r for r in rounds if r.stage == "fenced"]
        summary = (f"chaos (hosts): seed {seed}: {n} runs, {Counter(states.values())['completed']} completed; "
                   f"{WORKERS} workers on hosts of their own; {len(zombies)} zombie rounds (cut from "
                   f"{', '.join('+'.join(r.links) for r in zombies)}), each late commit fenced; "
                   f"{sum(cuts.values())} partitions mid-run ({dict(cuts)}); "
                   f"{receiver.deliveries} deliveries, {len(receiver.applied)} effects applied, "
                   f"{receiver.suppressed} duplicates suppressed; {attempts} attempts ({lost} leases lost), "
                   f"{fenced_events} commits fenced, {requeued} requeues of a silent worker's messages; "
                   f"wall time {wall:.1f} s, slowest run {slowest:.1f} s; workers stopped with "
                   f"{sorted(codes.values())}")
        print(summary)
        chaos_report(summary)

        # Then no run is lost and every run completed
        assert len(set(run_ids)) == n and sorted(states) == sorted(run_ids), f"seed {seed}: runs lost or added"
        assert Counter(states.values()) == {"completed": n}, \
            f"seed {seed}: {Counter(states.values())}\n" + _diagnosis(db, workers)
        # and every effect was applied exactly once at the receiver, under one key, never refused
        assert {pair: k for pair, k in applied.items() if k != 1} == {}, f"seed {seed}: effects applied twice"
        assert set(applied) == {(run, e) for run in run_ids for e in EFFECTS}, f"seed {seed}: effects missing"
        assert receiver.conflicts == []
        assert receiver.deliveries == len(receiver.applied) + receiver.suppressed
        # and every zombie's late commit was refused by its fence: the loss is counted, the step's one success is
        # another execution's (another token), its late delivery was a duplicate; and no step succeeded twice
        assert zombies, f"seed {seed}: no zombie round completed: {[r.stage for r in rounds]}"
        for z in zombies:
            run_id, step_id = z.held["run"], z.held["step"]
            rows = db.rows("SELECT attempt, state, token, leases_lost FROM attempts WHERE run_id = %s AND "
                           "step_id = %s ORDER BY attempt", run_id, step_id)
            assert z.fenced is not None and z.fenced["attempt"] == z.attempt, (z.fenced, z.attempt)
            assert sum(leases_lost for *_, leases_lost in rows) >= 1, (z.held, rows)
            won = [token for _, state, token, _ in rows if state == "succeeded"]
            assert len(won) == 1 and won[0] != z.token, (z.held, z.token, rows)
            assert receiver.per_key[z.held["key"]] >= 2, f"the zombie's late delivery of {z.held} never came"
        assert twice == [], f"seed {seed}: steps that succeeded twice: {twice}"
        # and the partitions happened, every worker stopped cleanly, and the audit chain verifies
        assert sum(cuts.values()) >= 1, "no partition besides the zombie rounds: the runs ended first"
        assert set(codes.values()) == {0}, f"a worker did not stop cleanly: {codes}"
        from sealflow.store import open_store
        from sealflow.store.auditchain import verify

        store = open_store(pg.socket_url)
        try:
            chain = verify(store)
        finally:
            store.close()
        assert chain.ok, f"seed {seed}: audit chain broken: {chain.first}"
    finally:
        hosts.heal_all()
        workers.stop()
        db.close()
        receiver.close()
        redis.close()
        pg.close()
