"""Benchmark: ``POST /v1/runs`` through ``sealflow serve`` (4 server processes, SQLite) next to the same
submit through the Python API, in one run; prints throughput, p50/p99 latency and the ratios.

    python -m tools.benchmarks.server [--runs 2000] [--workers 4] [--clients 8] [--rate-limit R]

Both sides submit runs of ``definitions/lead-qualification.v1.yaml`` (queued, not driven) as ``user:ana``
of tenant ``acme`` under the same access policy, each to a fresh SQLite store. The server side
authenticates an API token on every request, checks the access policy, validates the input and writes
the run; ``--no-work`` and ``--rate-limit 0`` keep the server to exactly that. The Python side calls
``Runtime.submit`` from one thread (the embedded default: one process, one SQLite connection).

With ``--rate-limit R`` the server side runs a second time with ``--rate-limit R`` (bursts of 2R), so the
cost of the per-principal limit counted in the store is measured against the unlimited server in the same
run; pick R above the throughput so that nothing is refused (a 429 is counted as "not 201").
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "definitions" / "lead-qualification.v1.yaml"
ACCESS = """\
tenants:
  acme:
    roles: {sales: [crm:read, crm:write, email:send]}
    members: {user:ana: [sales]}
"""
ENTRY = "import sys; from sealflow.cli import main; sys.exit(main(sys.argv[1:]))"


def _stats(latencies: list[float], elapsed: float) -> dict:
    ordered = sorted(latencies)
    return {"n": len(ordered), "per_s": len(ordered) / elapsed, "p50_ms": statistics.median(ordered) * 1000,
            "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000}


def python_api(folder: Path, runs: int) -> dict:
    import sealflow.demo  # noqa: F401 - registers the demo actions the example names
    from sealflow.dsl.api import check_file
    from sealflow.policy.access import FileAccess
    from sealflow.runtime.facade import Runtime

    plan = check_file(str(EXAMPLE)).plan
    with Runtime(f"sqlite:///{folder}/python.db", access=FileAccess(folder / "access.yaml")) as rt:
        rt.submit(plan, {"lead_id": "lead_warm"}, initiator="user:ana", tenant="acme")  # warm caches
        latencies = []
        t0 = time.perf_counter()
        for i in range(runs):
            s = time.perf_counter()
            rt.submit(plan, {"lead_id": f"lead_{i}"}, initiator="user:ana", tenant="acme")
            latencies.append(time.perf_counter() - s)
        return _stats(latencies, time.perf_counter() - t0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(*argv: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", ENTRY, *argv], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def server(folder: Path, runs: int, workers: int, clients: int, rate: float = 0.0) -> dict:
    import httpx

    store = f"sqlite:///{folder}/server-{rate:g}.db"
    access = str(folder / "access.yaml")
    _cli("submit", str(EXAMPLE), "--input", '{"lead_id": "lead_first"}', "--store", store, "--access", access,
         "--tenant", "acme", "--as", "user:ana", cwd=folder)
    token = _cli("tokens", "create", "--principal", "user:ana", "--tenant", "acme", "--store", store, cwd=folder)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", ENTRY, "serve", "--port", str(port), "--workers", str(workers),
                             "--store", store, "--access", access, "--actions", "sealflow.demo", "--no-work",
                             "--rate-limit", f"{rate:g}"],
                            cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=base) as http:
            for _ in range(300):
                try:
                    if http.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            for i in range(workers * 4):  # warm every process
                http.post("/v1/runs", json={"workflow": "lead-qualification", "input": {"lead_id": f"lead_w{i}"}},
                          headers=headers)
        latencies: list[float] = []
        errors: list[int] = []
        lock = threading.Lock()

        def client(offset: int) -> None:
            mine, bad = [], []
            with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
                for i in range(offset, runs, clients):
                    s = time.perf_counter()
                    body = {"workflow": "lead-qualification", "input": {"lead_id": f"lead_{i}"}}
                    r = http.post("/v1/runs", json=body)
                    mine.append(time.perf_counter() - s)
                    if r.status_code != 201:
                        bad.append(r.status_code)
            with lock:
                latencies.extend(mine)
                errors.extend(bad)

        threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out = _stats(latencies, time.perf_counter() - t0)
        out["errors"] = len(errors)
        return out
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rate-limit", type=float, default=0.0)
    args = parser.parse_args(argv)
    limited = None
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "access.yaml").write_text(ACCESS)
        py = python_api(folder, args.runs)
        http = server(folder, args.runs, args.workers, args.clients)
        if args.rate_limit > 0:
            limited = server(folder, args.runs, args.workers, args.clients, args.rate_limit)
    print(f"load average: {os.getloadavg()[0]:.2f}")
    print(f"{'path':<34} {'runs':>6} {'runs/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    print(f"{'Python API (1 thread)':<34} {py['n']:>6} {py['per_s']:>9.0f} {py['p50_ms']:>8.2f} {py['p99_ms']:>8.2f}")
    label = f"POST /v1/runs ({args.workers} proc, {args.clients} clients)"
    print(f"{label:<34} {http['n']:>6} {http['per_s']:>9.0f} {http['p50_ms']:>8.2f} {http['p99_ms']:>8.2f}"
          + (f"  ({http['errors']} not 201)" if http["errors"] else ""))
    if limited is not None:
        label = f"  same, --rate-limit {args.rate_limit:g}"
        print(f"{label:<34} {limited['n']:>6} {limited['per_s']:>9.0f} {limited['p50_ms']:>8.2f} "
              f"{limited['p99_ms']:>8.2f}" + (f"  ({limited['errors']} not 201)" if limited["errors"] else ""))
        print(f"rate-limited / unlimited server: {limited['per_s'] / http['per_s']:.2f}x throughput, "
              f"p99 {limited['p99_ms'] / http['p99_ms']:.2f}x")
    print(f"throughput ratio HTTP / Python API: {http['per_s'] / py['per_s']:.2f}x; "
          f"p99 ratio: {http['p99_ms'] / py['p99_ms']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
