"""Benchmark: the server time of the console's pages next to the JSON API serving the same data, in one run.

    python -m tools.benchmarks.console [--steps 1000] [--runs 100000] [--rounds 20]

Two pages: a run of ``--steps`` steps (``/ui/runs/{id}``: its status, the step table, the sections of the steps
that need one, the latest audit events; and with ``?graph=all``, its graph drawn as SVG, which a plan of more than
300 steps draws only when asked) next to ``GET /v1/runs/{id}`` (the same status as JSON) and ``GET
/v1/runs/{id}/audit``; and the first page of a list of ``--runs`` runs (``/ui/runs``: 50 runs and the count of
each state) and the same filtered by a state, next to ``GET /v1/runs`` (50 runs as JSON). Each request goes
through the ASGI app in this process (FastAPI's test client: no network), signed in (a session for the pages,
an API token for the API), on a SQLite store in a temporary folder; the median and the 95th percentile of
``--rounds`` requests each, after one warm-up.

The run is driven by the embedded runtime (no-op action steps, each reading the previous one's output); the
list's runs are copies of one submitted run written by one SQL statement (their states spread over five), so
that building the store takes seconds.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path

from tools.benchmarks.runtime import noop_plan, noop_runtime

STATES = ("completed", "failed", "running", "waiting", "cancelled")


def _fill(rt, db: Path, runs: int) -> None:
    """``runs`` copies of one submitted run of the store (the SQLite file ``db``), with ids, creation times and
    states of their own."""
    import sqlite3

    plan = noop_plan(1)
    first = rt.submit(plan, {}, initiator="user:bench", tenant="default")
    conn = sqlite3.connect(db, timeout=30)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    picked = ", ".join("'run_bench' || printf('%07d', n.i)" if c == "id"
                       else "created_at + n.i * 0.001" if c in ("created_at", "updated_at")
                       else f"CASE n.i % 5 {' '.join(f'WHEN {k} THEN {s!r}' for k, s in enumerate(STATES))} END"
                       if c == "state" else "NULL" if c == "idempotency_key" else c for c in cols)
    with conn:
        conn.execute(f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                     f"INSERT INTO runs ({', '.join(cols)}) SELECT {picked} FROM runs, n WHERE runs.id = ?",
                     (runs - 1, first))
    conn.close()


def _timed(client, url: str, rounds: int, **kw) -> dict:
    got = client.get(url, **kw)  # warm-up (and the check that it answers)
    assert got.status_code == 200, (url, got.status_code, got.text[:300])
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        got = client.get(url, **kw)
        times.append(time.perf_counter() - t0)
        assert got.status_code == 200
    ordered = sorted(times)
    return {"median_ms": statistics.median(ordered) * 1000,
            "p95_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000, "bytes": len(got.content)}


def _signed_in(client, rt) -> dict:
    from sealflow.server import tokens

    text, _ = tokens.create(rt.store, "user:bench", "default", rt.clock.now(), actor="user:root")
    page = client.get("/ui/signin").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    done = client.post("/ui/signin", data={"csrf_token": csrf, "token": text}, follow_redirects=False)
    assert done.status_code == 303, done.text[:300]
    return {"Authorization": f"Bearer {text}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)

    import logging

    from fastapi.testclient import TestClient

    from sealflow.server.app import create_app
    from sealflow.server.settings import ServerSettings

    logging.getLogger("sealflow.access").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as folder:
        rt = noop_runtime(folder)
        t0 = time.perf_counter()
        status = rt.run(noop_plan(args.steps, chained=True), {}, initiator="user:bench", tenant="default")
        assert status.state == "completed", status.state
        long_run = status.run.id
        built_run = time.perf_counter() - t0
        t0 = time.perf_counter()
        _fill(rt, Path(folder, "state.db"), args.runs)
        built_list = time.perf_counter() - t0
        print(f"store: a run of {args.steps} steps in {built_run:.1f} s; {args.runs} runs in {built_list:.1f} s "
              f"({Path(folder, 'state.db').stat().st_size / 2**20:.0f} MiB)")
        with TestClient(create_app(ServerSettings(rate=0, allow_open=True, work=False), rt)) as client:
            bearer = _signed_in(client, rt)
            rows = [
                (f"/ui/runs/{{id}} ({args.steps} steps)", _timed(client, f"/ui/runs/{long_run}", args.rounds)),
                ("/ui/runs/{id}?graph=all (its graph drawn too)", _timed(client, f"/ui/runs/{long_run}?graph=all",
                                                                          args.rounds)),
                ("GET /v1/runs/{id} (same run, JSON)", _timed(client, f"/v1/runs/{long_run}", args.rounds,
                                                             headers=bearer)),
                ("GET /v1/runs/{id}/audit (same run)", _timed(client, f"/v1/runs/{long_run}/audit", args.rounds,
                                                              headers=bearer)),
                (f"/ui/runs ({args.runs} runs: 50 and the counts)", _timed(client, "/ui/runs", args.rounds)),
                ("/ui/runs?state=failed", _timed(client, "/ui/runs?state=failed", args.rounds)),
                ("GET /v1/runs?limit=50 (JSON)", _timed(client, "/v1/runs?limit=50", args.rounds, headers=bearer)),
            ]
        rt.close()
    print("\n| request | median ms | p95 ms | bytes |\n|---|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['median_ms']:.1f} | {r['p95_ms']:.1f} | {r['bytes']} |")
    page, api = rows[0][1]["median_ms"], rows[2][1]["median_ms"]
    listing, list_api = rows[4][1]["median_ms"], rows[6][1]["median_ms"]
    print(f"\nrun page / run JSON: {page / api:.2f}x; runs page / runs JSON: {listing / list_api:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
