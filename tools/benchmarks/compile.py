"""Benchmark: validate + compile every definition, next to a floor measured in the same run.

    python -m tools.benchmarks.compile [--rounds 200] [--starts 20] [--steps 1000,10000] [PATH...]

The floor is ``yaml.safe_load`` plus a bare ``jsonschema`` validation of the same
bytes with a pre-built validator: the least any validator of this language must do.
A second, harder floor uses libyaml (``CSafeLoader``), the parser Sealflow itself uses.
Sealflow's full path adds located loading, error mapping, the pydantic model,
compilation, expression checks and the digest. Prints medians per definition and
the ratio.

Then, each in a fresh process (``sealflow validate FILE``, the installed command):

- start-up: the first definition, next to ``python -c "import yaml, jsonschema"`` (the peer), the two run in
  turn and the ratio taken pair by pair; the median ratio is printed;
- size: generated definitions of ``--steps`` steps (a chain, each step reading the one before it through
  ``${{ steps.<previous>.output }}``), wall time and peak memory (the child's own ``ru_maxrss``), and the
  ratio of each to the smallest.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
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
    parser.add_argument("--starts", type=int, default=20, help="start-up runs of each command (default 20)")
    parser.add_argument("--steps", default="1000,10000",
                        help="sizes of the generated chains, comma-separated ('' for none; default 1000,10000)")
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

    _start_up(files[0], args.starts)
    _sizes([int(n) for n in args.steps.split(",") if n])
    return 0


def _validate_command() -> list[str]:
    """``sealflow validate`` as installed beside this Python (the console script), else its equivalent."""
    script = Path(sys.executable).with_name("sealflow")
    if script.exists():
        return [str(script), "validate"]
    return [sys.executable, "-c", "import sys; from sealflow.cli import main; sys.exit(main())", "validate"]


def _run(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak resident memory (bytes) of one child process; it must succeed."""
    with tempfile.TemporaryFile() as errors:
        t0 = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errors)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own usage, not all children's
        wall = time.perf_counter() - t0
        child.returncode = code = os.waitstatus_to_exitcode(status)
        if code != 0:
            errors.seek(0)
            raise SystemExit(f"{' '.join(cmd)} exited {code}: {errors.read().decode(errors='replace')[-2000:]}")
    return wall, usage.ru_maxrss * 1024  # Linux: kilobytes


def _start_up(target: Path, starts: int) -> None:
    sealflow = _validate_command() + [str(target)]
    peer = [sys.executable, "-c", "import yaml, jsonschema"]
    _run(sealflow), _run(peer)  # warm the file system cache and the bytecode
    ours, theirs, ratios = [], [], []
    for _ in range(starts):
        a, _ = _run(sealflow)
        b, _ = _run(peer)
        ours.append(a)
        theirs.append(b)
        ratios.append(a / b)
    print(f"start-up, median of {starts} runs in turn: `sealflow validate {target.name}` "
          f"{statistics.median(ours) * 1000:.0f} ms, `python -c \"import yaml, jsonschema\"` "
          f"{statistics.median(theirs) * 1000:.0f} ms: ratio {statistics.median(ratios):.2f}x")


def chain_definition(steps: int) -> str:
    """A valid definition of ``steps`` action steps in a chain, each reading the output of the one before."""
    lines = ["sealflow: 1", "name: chain", "version: 1", "owner: team:bench", "steps:",
             '- {id: s0, action: bench.step, with: {x: "${{ input.x }}"}}']
    lines += [f'- {{id: s{i}, action: bench.step, with: {{x: "${{{{ steps.s{i - 1}.output }}}}"}}}}'
              for i in range(1, steps)]
    return "\n".join(lines) + "\n"


def _sizes(sizes: list[int]) -> None:
    if not sizes:
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"chain-{n}.yaml"
            path.write_text(chain_definition(n))
            wall, peak = _run(_validate_command() + [str(path)])
            rows.append((n, path.stat().st_size, wall, peak))
    base = rows[0]
    print(f"{'steps':>7} {'bytes':>9} {'time (s)':>9} {'peak (MB)':>10} {'time ratio':>11} {'memory ratio':>13}")
    for n, size, wall, peak in rows:
        print(f"{n:>7} {size:>9} {wall:>9.2f} {peak / 2**20:>10.0f} {wall / base[2]:>10.1f}x "
              f"{peak / base[3]:>12.1f}x")


if __name__ == "__main__":
    sys.exit(main())
