#!/usr/bin/env bash
# Build the Sealflow image and run workflows inside it (docs/deployment.md, "The container image").
#
#   tools/deploy/build-image.sh            # -> localhost/sealflow:0.1.0, then the smoke test
#   SEALFLOW_IMAGE_SMOKE=0 tools/deploy/build-image.sh     # build only
#
# 1. The base: Debian bookworm minbase with python3 (3.11), python3-venv and ca-certificates, made by mmdebstrap
#    from the dated snapshot $SEALFLOW_DEBIAN_SNAPSHOT of snapshot.debian.org when it answers, else (said on stderr
#    and recorded) from $SEALFLOW_DEBIAN_MIRROR; SOURCE_DATE_EPOCH is the snapshot's time. It is imported with
#    buildah as localhost/sealflow-base:bookworm-<snapshot>. build/image/base.txt records the mirror used, the
#    tarball's sha256 and every package and version in it: what the base is pinned to.
# 2. The wheels, on this machine: sealflow's own, and every dependency (extras redis, rabbitmq) as a binary wheel
#    for the base's Python (CPython 3.11.2, glibc 2.36, x86_64), plus cyclonedx-bom for the image's SBOM. The build
#    fetches nothing.
# 3. buildah bud --isolation chroot of tools/deploy/Containerfile (docker format: it keeps HEALTHCHECK).
# 4. The smoke test, with buildah run --isolation chroot as the image's user: `sealflow run` of the example
#    project's hello workflow; then a `sealflow worker` (on this machine's Redis, a queue of its own) and a
#    `sealflow serve --no-work` started in the image, both passing the image's health check
#    (sealflow-healthcheck on the worker's metrics port and the server's /readyz), a run submitted and completed
#    by that worker, and the worker stopped by SIGTERM (exit 0). Also: the image runs as uid 10001, holds no
#    compiler, and its SBOM (copied to build/image/sbom.cdx.json) lists sealflow and its dependencies, no test tool.
# Needs root, mmdebstrap, buildah (Debian packages) and, for the smoke test, Redis on 127.0.0.1:6379.
set -euo pipefail
cd "$(dirname "$0")/../.."

VERSION=0.1.0
IMAGE=localhost/sealflow:$VERSION
SNAPSHOT=${SEALFLOW_DEBIAN_SNAPSHOT:-20261201T000000Z}
MIRROR=${SEALFLOW_DEBIAN_MIRROR:-http://deb.debian.org/debian}
OUT=build/image
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"
started=$(date +%s)
say() { echo "build-image: $*" >&2; }

# -- 1. the base --------------------------------------------------------------------------------------------
snapshot_url="http://snapshot.debian.org/archive/debian/$SNAPSHOT"
if curl -sf -o /dev/null --max-time 10 "$snapshot_url/dists/bookworm/Release"; then
  mirror=$snapshot_url
else
  say "snapshot.debian.org does not answer: the base is built from $MIRROR (not a dated snapshot; its packages are recorded in $OUT/base.txt)"
  mirror=$MIRROR
fi
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(date -u -d "${SNAPSHOT:0:8} ${SNAPSHOT:9:2}:${SNAPSHOT:11:2}:${SNAPSHOT:13:2}" +%s)}
base_tag=localhost/sealflow-base:bookworm-$SNAPSHOT
if [ "${SEALFLOW_IMAGE_REBUILD_BASE:-0}" = 1 ] || ! buildah inspect "$base_tag" >/dev/null 2>&1; then
  rm -f "$OUT/base.tar"
  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    bookworm "$OUT/base.tar" "$mirror"
  ctr=$(buildah from scratch)
  buildah add --quiet "$ctr" "$OUT/base.tar" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  buildah commit --quiet "$ctr" "$base_tag" >/dev/null
  buildah rm "$ctr" >/dev/null
  {
    echo "mirror: $mirror"
    echo "suite: bookworm, variant minbase, SOURCE_DATE_EPOCH $SOURCE_DATE_EPOCH"
    echo "rootfs sha256: $(sha256sum "$OUT/base.tar" | cut -d' ' -f1)"
    echo "image: $base_tag $(buildah inspect --format '{{.FromImageID}}' "$base_tag")"
    echo "packages:"
    tar -xOf "$OUT/base.tar" ./var/lib/dpkg/status \
      | awk '/^Package:/{p=$2} /^Version:/{print "  " p " " $2}'
  } > "$OUT/base.txt"
  rm -f "$OUT/base.tar"
fi
say "base $base_tag ($(($(date +%s) - started)) s)"

# -- 2. the wheels ------------------------------------------------------------------------------------------
ctx=$OUT/context
rm -rf "$ctx" && mkdir -p "$ctx/wheels"
cp tools/deploy/healthcheck.py "$ctx/"
pip_quietly() {  # pip, its output kept in $OUT/pip.log and shown only when it fails
  "$PY" -m pip "$@" > "$OUT/pip.log" 2>&1 || { grep -v '^WARNING: Location' "$OUT/pip.log" >&2; say "pip $1 failed"; exit 1; }
}
pip_quietly wheel --quiet --no-deps -w "$ctx/wheels" .
platforms=()
for v in 36 35 34 33 32 31 30 29 28 27 26 25 24 17 12 5; do platforms+=(--platform "manylinux_2_${v}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
# (async-timeout: redis needs it below Python 3.11.3, which pip cannot tell from --python-version alone)
pip_quietly download --quiet --only-binary=:all: --python-version 3.11.2 --implementation cp --abi cp311 \
  --abi abi3 --abi none "${platforms[@]}" -d "$ctx/wheels" \
  "$(ls "$ctx"/wheels/sealflow-$VERSION-*.whl)[redis,rabbitmq]" 'async-timeout>=4.0.3' cyclonedx-bom
ls "$ctx"/wheels/sealflow-$VERSION-*.whl >/dev/null
say "$(ls "$ctx/wheels" | wc -l) wheels ($(($(date +%s) - started)) s)"

# -- 3. the image -------------------------------------------------------------------------------------------
previous=$(buildah inspect --format '{{.FromImageID}}' "$IMAGE" 2>/dev/null || true)
buildah bud --quiet --isolation chroot --format docker --build-arg "BASE=$base_tag" \
  -f tools/deploy/Containerfile -t "$IMAGE" "$ctx" >/dev/null
if [ -n "$previous" ] && [ "$previous" != "$(buildah inspect --format '{{.FromImageID}}' "$IMAGE")" ]; then
  buildah rmi "$previous" >/dev/null 2>&1 || true  # the image this tag named before, now untagged
fi
say "built $IMAGE $(buildah inspect --format '{{.FromImageID}}' "$IMAGE") ($(($(date +%s) - started)) s)"
[ "${SEALFLOW_IMAGE_SMOKE:-1}" = 1 ] || exit 0

# -- 4. the smoke test --------------------------------------------------------------------------------------
ctr=$(buildah from "$IMAGE")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  buildah rm "$ctr" >/dev/null 2>&1 || true
}
trap cleanup EXIT
buildah copy --quiet "$ctr" tools/deploy/project /etc/sealflow >/dev/null
# run a command in the image as its user (10001), with the example project ("${run[@]}" CMD: so that a background
# command's $! is buildah's own pid, which passes SIGTERM on to the command)
run=(buildah run --isolation chroot --user 10001:10001 --env SEALFLOW_PROJECT=/etc/sealflow/sealflow.yaml
     --env SEALFLOW_STORE=sqlite:////tmp/smoke.db "$ctr" --)
in_image() { "${run[@]}" "$@"; }
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# what the image holds: its user, no compiler, its SBOM (copied out beside the build's records)
[ "$(in_image id -u)" = 10001 ]
if in_image sh -c 'command -v gcc || command -v cc || command -v c++ || command -v clang'; then
  say "the image holds a compiler"; exit 1
fi
in_image cat /opt/sealflow/sbom.cdx.json > "$OUT/sbom.cdx.json"
"$PY" -c 'import json, sys; names = {c["name"].lower() for c in json.load(open(sys.argv[1]))["components"]}
assert {"sealflow", "pydantic", "dramatiq", "redis", "pika"} <= names and "pytest" not in names, names' "$OUT/sbom.cdx.json"

# a workflow, driven in the image by `sealflow run`
in_image sealflow run /etc/sealflow/definitions/hello.v1.yaml --input '{"name": "image"}' --as user:ana \
  | tee "$OUT/smoke-run.txt" >&2
grep -q 'output: "hello, image"' "$OUT/smoke-run.txt"

# a worker and the server in the image, healthy by the image's own check; a run submitted, the worker runs it
queue=smoke_$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
metrics=$(free_port)
http=$(free_port)
# (--allow-unsigned: the example project has no trust policy; a deployment's workers run signed definitions only)
"${run[@]}" sealflow worker --broker redis://127.0.0.1:6379/0 --queue "$queue" --threads 2 --grace 10 --allow-unsigned \
  --metrics-port "$metrics" > "$OUT/smoke-worker.log" 2>&1 &
worker=$!
pids+=("$worker")
"${run[@]}" sealflow serve --no-work --port "$http" > "$OUT/smoke-server.log" 2>&1 &
pids+=($!)
healthy() {
  for _ in $(seq 1 60); do
    in_image sealflow-healthcheck "$1" 2>/dev/null && return 0
    sleep 0.5
  done
  in_image sealflow-healthcheck "$1"
}
healthy "http://127.0.0.1:$metrics/metrics"
healthy "http://127.0.0.1:$http/readyz"
say "worker and server healthy ($(($(date +%s) - started)) s)"
run_id=$(in_image sealflow submit /etc/sealflow/definitions/hello.v1.yaml --input '{"name": "worker"}' \
  --as user:ana --json | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["run_id"])')
state=""
for _ in $(seq 1 60); do
  # (status exits 3 while the run is not final: its JSON says the state)
  state=$({ in_image sealflow status "$run_id" --as user:ana --json || true; } \
    | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["state"])')
  [ "$state" = completed ] && break
  sleep 0.5
done
[ "$state" = completed ] || { say "run $run_id is $state, not completed"; tail -20 "$OUT/smoke-worker.log" >&2; exit 1; }
grep -q "run $run_id: step greet attempt 1: started" "$OUT/smoke-worker.log"
# buildah run does not pass SIGTERM on (it kills its command): signal the worker process itself, the descendant
# of that buildah run whose command line is the worker's (chroot isolation: it is a process of this machine)
descendants() { local c; for c in $(ps -o pid= --ppid "$1"); do echo "$c"; descendants "$c"; done; }
worker_pid=""
for pid in $(descendants "$worker"); do
  if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "sealflow worker"; then worker_pid=$pid; fi
done
[ -n "$worker_pid" ] || { say "cannot find the worker's process under buildah run $worker"; exit 1; }
kill -TERM "$worker_pid"
wait "$worker" || { say "the worker exited $? at SIGTERM, not 0"; tail -20 "$OUT/smoke-worker.log" >&2; exit 1; }
grep -q "worker stopped" "$OUT/smoke-worker.log"
say "smoke test passed: hello ran in the image by sealflow run, and by a worker (run $run_id); the worker stopped on SIGTERM ($(($(date +%s) - started)) s)"
