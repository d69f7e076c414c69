"""Shared pieces of the fan-out tests: definitions compiled from YAML, a recording world, a serving runtime.

The actions record, in real time, when each item ran (``intervals``) and apply their effect at an idempotent
receiver (``effects``: one row per idempotency key; ``calls``: every call), in a SQLite file, so a test can
check them across threads and processes.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from interp_helpers import BACKENDS

from sealflow.dsl.api import compile_bytes
from sealflow.execution.actions import Registry, action
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store

SCHEMA = ("CREATE TABLE IF NOT EXISTS intervals (label TEXT, pid INTEGER, start REAL, end REAL);"
          "CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, label TEXT);"
          "CREATE TABLE IF NOT EXISTS calls (label TEXT, key TEXT, pid INTEGER)")


def definition(body: str, name: str = "fan") -> Any:
    """A plan compiled from the YAML steps ``body`` (indented under ``steps:``)."""
    text = f"sealflow: 1\nname: {name}\nversion: 1\nowner: team:t\nsteps:\n{body}"
    return compile_bytes(text.encode(), f"{name}.yaml")


def map_of(items: str, *, concurrency: int = 2, max_items: int = 100, tolerate: Any = 0, retry: int = 1,
           extra: str = "") -> Any:
    """A map over ``items`` whose sub-flow records the item (``t.record``), then a step reading its output."""
    return definition(f"""  - id: each
    map:
      items: "{items}"
      concurrency: {concurrency}
      max_items: {max_items}
      tolerate_failures: {tolerate!r}
      steps:
        - id: rec
          action: t.record
          with: {{label: "${{{{ item }}}}"}}
          idempotency_key: "${{{{ run.id }}}}:rec:${{{{ index }}}}"
          timeout: 20s
          retry: {{max_attempts: {retry}, on: [worker_lost, timeout]}}
{extra}""")


def map_over(steps: str, *, concurrency: int, tolerate: int | None = None, name: str = "fan") -> Any:
    """A plan whose step ``each`` maps the YAML ``steps`` (indented under the map's ``steps:``; what follows
    them, such as further top-level steps, is kept) over ``input.items``, at most 10 of them."""
    tolerance = "" if tolerate is None else f"      tolerate_failures: {tolerate}\n"
    return definition(f"""  - id: each
    map:
      items: "input.items"
      concurrency: {concurrency}
      max_items: 10
{tolerance}      steps:
{steps}""", name)


class World:
    """``t.record``: records its interval and applies its effect once per idempotency key. An item whose
    label starts with ``fail`` raises; ``hold`` items wait for :attr:`release`."""

    def __init__(self, db: str, registry: Registry | None = None):
        self.db = db
        self.registry = registry or Registry()
        self.release = threading.Event()
        self.seconds = 0.05
        self.started: list[str] = []  # labels, in the order their actions started (this process)
        conn = sqlite3.connect(db, timeout=30, isolation_level=None)
        conn.executescript(SCHEMA)
        conn.close()

        @action("t.record", registry=self.registry, effect="irreversible")
        def rec(ctx, label: Any):
            start = time.time()
            label = str(label)
            self.started.append(label)
            hang = os.environ.get("FAN_HANG")
            if hang and hang == label and os.environ.get("FAN_MARKER"):
                self.write(start, float("inf"), label, ctx.idempotency_key, effect=False)
                with open(os.environ["FAN_MARKER"], "w") as fh:
                    fh.write(str(os.getpid()))
                time.sleep(120)  # the test SIGKILLs this process here
            if label.startswith("hold"):
                self.release.wait(30)
            else:
                time.sleep(self.seconds)
            if label.startswith("fail"):
                self.write(start, time.time(), label, ctx.idempotency_key, effect=False)
                raise ValueError(f"item {label} fails")
            self.write(start, time.time(), label, ctx.idempotency_key)
            return f"done:{label}"

    def write(self, start: float, end: float, label: str, key: str | None, *, effect: bool = True) -> None:
        conn = sqlite3.connect(self.db, timeout=30, isolation_level=None)
        try:
            conn.execute("INSERT INTO intervals VALUES (?,?,?,?)", (label, os.getpid(), start, end))
            if effect:
                conn.execute("INSERT INTO calls VALUES (?,?,?)", (label, key, os.getpid()))
                conn.execute("INSERT OR IGNORE INTO effects VALUES (?,?)", (key, label))
        finally:
            conn.close()

    def rows(self, sql: str) -> list[tuple]:
        conn = sqlite3.connect(self.db, timeout=30)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end before a start at the same instant)."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = peak = 0
    for _, d in edges:
        now += d
        peak = max(peak, now)
    return peak


def wait_for(predicate, seconds: float = 30.0) -> None:
    end = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.02)


def store_url(request: Any, tmp_path: Path, name: str = "fan.db", *, migrated: bool = False) -> str:
    """The store URL for the backend ``request.param``: a SQLite file ``name`` under ``tmp_path``, or a fresh
    PostgreSQL schema; ``migrated``: created and migrated now (before several processes open it)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/{name}"
    else:
        url = request.getfixturevalue("pg_schema").url(migrate="1")
    if migrated:
        open_store(url).close()
    return url


@contextmanager
def world_runtime(world: Any, url: str, providers: dict | None = None, threads: int = 4, **kw: Any) -> Iterator[Any]:
    """``world`` with a runtime (``world.rt``, built with ``kw``) on the store at ``url``, closed (held items
    released) after."""
    world.rt = Runtime(open_store(url), world.registry, providers or {}, worker_threads=threads,
                       worker_timeout_ms=20, **kw)
    try:
        yield world
    finally:
        world.release.set()
        world.rt.close()
        world.rt.store.close()


@contextmanager
def serving(world: Any) -> Iterator[Any]:
    """The world's runtime working, dispatching and sweeping on a background thread (as `sealflow worker`)."""
    stop = threading.Event()
    thread = threading.Thread(target=world.rt.serve, args=(stop,), kwargs={"interval": 0.02, "allow_open": True},
                              daemon=True)
    thread.start()
    try:
        yield world
    finally:
        world.release.set()
        stop.set()
        thread.join(10)


def start_process(script: Path, args: list[Any], paths: list[Path], **env: str) -> subprocess.Popen:
    """``script`` run with ``args`` in a new Python process, ``paths`` first on its PYTHONPATH, ``env`` added."""
    e = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), os.environ.get("PYTHONPATH", "")]), **env}
    return subprocess.Popen([sys.executable, str(script), *map(str, args)],
                            env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> None:
    """Waits (bounded) for ``proc`` and asserts it succeeded, showing its output if not."""
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err


# -- fixtures the fan-out and call tests share (a module imports them by name: ``world``, ``gated``) ------------

@pytest.fixture(name="world", params=BACKENDS)
def fanout_world(request: Any, tmp_path: Path) -> Iterator[Any]:
    """A recording :class:`World` with a runtime on each store (SQLite file, fresh PostgreSQL schema)."""
    with world_runtime(World(str(tmp_path / "world.db")), store_url(request, tmp_path)) as w:
        yield w


@pytest.fixture(name="gated", params=BACKENDS)
def gated_world(request: Any, tmp_path: Path) -> Iterator[Any]:
    """The world with a worker that has a trust gate (unsigned runs allowed)."""
    from sealflow.policy.trustgate import TrustGate

    with world_runtime(World(str(tmp_path / "world.db")), store_url(request, tmp_path),
                       trust_gate=TrustGate(allow_unsigned=True)) as w:
        yield w
