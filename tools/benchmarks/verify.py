"""Benchmark: the cost of verifying a signed definition, next to the cost of compiling it, in one run.

    python -m tools.benchmarks.verify [--rounds 200] [--starts 10] [PATH...]

Per definition (medians over ``--rounds``, warm caches, as a long-lived runtime would be):

* compile: ``sealflow.dsl.api.check_bytes`` (load, schema, model, compile, digest);
* Ed25519 DSSE: parsing the envelope and checking the signature against the policy's keys;
* Sigstore: verifying the staging fixture bundle offline against the pinned staging root
  (certificate chain, SCT, transparency-log inclusion and signed checkpoint, identity policy,
  artifact digest); the same for every row, since no definition is Sigstore-signed offline;
* full verify: ``sealflow.dsl.trust.verify_bytes`` with the DSSE envelope: signature, then compile,
  then the namespace check; what the runtime pays to load a definition.

Then one-off costs: building the Sigstore verifier from the root file, and process start-up:
``sealflow validate FILE`` in a fresh process with and without ``import sigstore.verify`` first,
and the bare imports. The Sigstore fixtures are read from ../shared/fixtures/sigstore/; without
them the Sigstore columns are skipped.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = (ROOT / ".." / "shared" / "fixtures" / "sigstore").resolve()


def _median_ns(fn, rounds: int) -> float:
    return _medians_ns([fn], rounds)[0]


def _medians_ns(fns, rounds: int) -> list[float]:
    """Medians of each of ``fns``, timed in interleaved rounds so that machine noise hits them alike."""
    for fn in fns:
        fn()  # warm up
    samples: list[list[int]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, out in zip(fns, samples, strict=True):
            t0 = time.perf_counter_ns()
            fn()
            out.append(time.perf_counter_ns() - t0)
    return [statistics.median(s) for s in samples]


def _median_process_ms(argv: list[str], starts: int) -> float:
    times = []
    for _ in range(starts):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", default=[str(ROOT / "definitions")])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--starts", type=int, default=10, help="fresh processes per start-up figure")
    args = parser.parse_args(argv)

    from sealflow.dsl.api import check_bytes
    from sealflow.dsl.trust import load_policy, signing, verify_bytes, verify_envelope, verify_sigstore

    files: list[Path] = []
    for p in map(Path, args.paths):
        files.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])

    work = Path(tempfile.mkdtemp(prefix="sealflow-bench-"))
    key = signing.generate_key()
    (work / "ops.pub.pem").write_bytes(signing.public_pem(key.public_key()))
    (work / "policy.yaml").write_text("keys: [{id: ops, public_key: ops.pub.pem}]\n")
    key_policy = load_policy(work / "policy.yaml")

    sigstore_ns = None
    have_fixtures = (FIXTURES / "staging-rekor-v2.txt.sigstore.json").is_file()
    if have_fixtures:
        (work / "sigstore.yaml").write_text(
            f"sigstore:\n  trusted_root: {FIXTURES / 'staging_trusted_root.json'}\n"
            "  identities: [{issuer: https://github.com/login/oauth, identity: jku@goto.fi}]\n")
        artifact = (FIXTURES / "staging-rekor-v2.txt").read_bytes()
        bundle = (FIXTURES / "staging-rekor-v2.txt.sigstore.json").read_bytes()

        def build_verifier():
            load_policy(work / "sigstore.yaml").sigstore_verifier()

        t0 = time.perf_counter_ns()
        sig_policy = load_policy(work / "sigstore.yaml")
        verify_sigstore(artifact, bundle, sig_policy)  # imports sigstore, builds the verifier
        first_ns = time.perf_counter_ns() - t0
        verifier_ns = _median_ns(build_verifier, max(10, args.rounds // 10))
        sigstore_ns = _median_ns(lambda: verify_sigstore(artifact, bundle, sig_policy), args.rounds)

    print(f"{'definition':<34} {'bytes':>6} {'compile':>9} {'ed25519':>9} {'sigstore':>9} {'full (dsse)':>12} "
          f"{'sig/compile':>12}")
    print(f"{'':<34} {'':>6} {'(us)':>9} {'(us)':>9} {'(us)':>9} {'(us)':>12} {'ed / sigst.':>12}")
    for f in files:
        data = f.read_bytes()
        envelope = signing.to_json(signing.sign(data, key, keyid="ops"))

        # the closures bind this iteration's file (default arguments), though they only run within it
        def compile_(data: bytes = data, f: Path = f) -> None:
            result = check_bytes(data, str(f))
            assert result.plan is not None, [d.format() for d in result.diagnostics]

        compile_ns, ed_ns, full_ns = _medians_ns([
            compile_,
            lambda data=data, envelope=envelope: verify_envelope(data, envelope, key_policy),
            lambda data=data, f=f, envelope=envelope: verify_bytes(data, str(f), envelope, key_policy),
        ], args.rounds)
        sig = f"{sigstore_ns / 1000:>9.0f}" if sigstore_ns else f"{'-':>9}"
        ratio = f"{ed_ns / compile_ns:.2f} / " + (f"{sigstore_ns / compile_ns:.2f}" if sigstore_ns else "-")
        print(f"{f.name:<34} {len(data):>6} {compile_ns / 1000:>9.0f} {ed_ns / 1000:>9.0f} {sig} "
              f"{full_ns / 1000:>12.0f} {ratio:>12}")

    if have_fixtures:
        print(f"sigstore, once per process: first verification {first_ns / 1e6:.1f} ms (import + root + verify); "
              f"building the verifier from the root file {verifier_ns / 1e6:.1f} ms")

    target = str(files[0])
    py = sys.executable
    runs = {
        "bare python": [py, "-c", "pass"],
        "import sealflow.cli, sealflow.dsl.api": [py, "-c", "import sealflow.cli, sealflow.dsl.api"],
        "import sigstore.verify": [py, "-c", "import sigstore.verify"],
        "sealflow validate FILE": [py, "-m", "tools", "validate", target],
        "sealflow validate FILE + import sigstore.verify": [
            py, "-c", "import sys, sigstore.verify; from sealflow.cli import main; sys.exit(main(sys.argv[1:]))",
            "validate", target],
    }
    print(f"start-up, median of {args.starts} fresh processes:")
    for label, command in runs.items():
        print(f"  {label:<50} {_median_process_ms(command, args.starts):>6.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
