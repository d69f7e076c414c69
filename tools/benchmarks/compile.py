"""Benchmark: validate + compile every definition, next to a floor measured in the same run.

    python -m tools.benchmarks.compile [--rounds 200] [PATH...]

The floor is ``yaml.safe_load`` plus a bare ``jsonschema`` validation of the same
bytes with a pre-built validator: the least any validator of this language must do.
A second, harder floor uses libyaml (``CSafeLoader``), the parser Sealflow itself uses.
Sealflow's full path adds located loading, error mapping, the pydantic model,
compilation, expression checks and the digest. Prints medians per definition and
the ratio. Also times ``sealflow validate FILE`` end to end in a fresh process.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parents[2]


def _median_ns(fn, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", default=[str(ROOT / "definitions")])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args(argv)

    from sealflow.dsl.api import check_bytes
    from sealflow.schemas import load as load_schema

    files: list[Path] = []
    for p in map(Path, args.paths):
        files.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])
    validator = Draft202012Validator(load_schema())
    print(f"{'definition':<36} {'floor (us)':>10} {'libyaml floor':>13} {'sealflow (us)':>13} {'ratio':>6} "
          f"{'vs libyaml':>10}")
    ratios, c_ratios = [], []
    for f in files:
        data = f.read_bytes()

        # each closure binds this iteration's file (default arguments), though it only runs within it
        def floor(data: bytes = data) -> None:
            doc = yaml.safe_load(data)
            for _ in validator.iter_errors(doc):
                pass

        def c_floor(data: bytes = data) -> None:
            doc = yaml.load(data, Loader=yaml.CSafeLoader)
            for _ in validator.iter_errors(doc):
                pass

        def full(data: bytes = data, f: Path = f) -> None:
            result = check_bytes(data, str(f))
            assert result.plan is not None, [d.format() for d in result.diagnostics]

        full()  # warm caches (grammar, schema validator), as a long-lived process would
        floor_ns = _median_ns(floor, args.rounds)
        c_floor_ns = _median_ns(c_floor, args.rounds)
        full_ns = _median_ns(full, args.rounds)
        ratios.append(full_ns / floor_ns)
        c_ratios.append(full_ns / c_floor_ns)
        print(f"{f.name:<36} {floor_ns / 1000:>10.0f} {c_floor_ns / 1000:>13.0f} {full_ns / 1000:>13.0f} "
              f"{full_ns / floor_ns:>5.2f}x {full_ns / c_floor_ns:>9.2f}x")
    print(f"median ratio, sealflow / floor: {statistics.median(ratios):.2f}x; "
          f"sealflow / libyaml floor: {statistics.median(c_ratios):.2f}x")

    target = str(files[0])
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "tools", "validate", target], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    bare = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - t0)
    print(f"`sealflow validate {Path(target).name}` end to end: median {statistics.median(times) * 1000:.0f} ms "
          f"(bare python start-up {statistics.median(bare) * 1000:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
