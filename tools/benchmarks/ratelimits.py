"""Benchmark: what a model's rate limit costs each call, against the quota reservation in the same run.

    python -m tools.benchmarks.ratelimits [--calls 2000] [--store URL]

A call to a model with ``rate_limit:`` takes the limiter (one store transaction: lock the model's row,
drop the grants that left the window from its running totals, compare, record one) and settles it after
the call (a second one); a call of a
tenant with a daily quota reserves its worst case and drops the reservation (two write transactions too:
the peer). Both are timed, interleaved,
on one store (default: a fresh SQLite file in a temporary directory), with the limit high enough that
every call is granted and the window holding up to ``--calls`` grants. Prints the median and mean
microseconds per call and the ratio limiter / reservation.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from sealflow.core.ratelimits import Limit
from sealflow.store import open_store


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--store", default=None, help="a store URL (default: a temporary SQLite file)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(args.store or f"sqlite:///{tmp}/bench.db")
        limit = Limit(requests=10 * args.calls, tokens=10_000 * args.calls)
        n = [0]

        def limiter() -> None:
            n[0] += 1
            key = f"bench:{n[0]}"
            assert store.rate_take("bench", key, time.time(), limit, 500) is None
            store.rate_settle(key, 120)

        def reservation() -> None:
            n[0] += 1
            key = f"run{n[0]}:step:1"
            now = time.time()
            assert store.reserve_usage(key, f"run{n[0]}", "acme", int(now // 86400), 500, 0.01, now, now + 90,
                                       max_tokens=10**12, max_cost_usd=None) is None
            store.release_usage(key)

        for fn in (limiter, reservation):
            for _ in range(50):
                fn()
        times: dict[str, list[float]] = {"limiter": [], "reservation": []}
        for _ in range(args.calls):  # interleaved, so drift on a shared machine hits both alike
            for name, fn in (("limiter", limiter), ("reservation", reservation)):
                start = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - start) * 1e6)
        store.close()
    for name, values in times.items():
        print(f"{name:11s} median {statistics.median(values):8.1f} µs   mean {statistics.fmean(values):8.1f} µs "
              f"per call ({args.calls} calls)")
    ratio = statistics.median(times["limiter"]) / statistics.median(times["reservation"])
    print(f"ratio limiter / reservation (median): {ratio:.2f}x")


if __name__ == "__main__":
    main()
