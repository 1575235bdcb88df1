#!/usr/bin/env bash
# The whole test suite: lint, types, then every test (the real-Kubernetes ones included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/ruff check kubeacc tests bench
.venv/bin/ruff format --check kubeacc tests bench
.venv/bin/mypy kubeacc
# Real Kubernetes for the cluster tests: built from the pinned Go modules, cached outside the
# repo (~/.cache/kubeacc), reused when the sources did not change. ~16 min cold on 2 cores.
# The main lane is Kubernetes 1.37 (KUBEACC_K8S_VERSION unset); 1.36 is the compatibility lane below.
unset KUBEACC_K8S_VERSION
.venv/bin/python -m kubeacc.testbed build
# The real container runtime (containerd, its shim, ctr, CNI bridge/host-local/loopback) from
# tools/containerd, cached in ~/.cache/kubeacc/containerd-*; ~2-3 min cold, seconds warm.
.venv/bin/python -m kubeacc.testbed runtime
# The kube-acc image for the chart's pods on the real runtime, made from this Python and the
# source tree (no registry, no Debian mirror), cached in ~/.cache/kubeacc/kubeacc-image-*; ~3 s.
.venv/bin/python -m kubeacc.testbed image
# kube-scheduler's allocator as a small Go program (tools/allocator) for the differential tests,
# one build per release (v1.37.2: the main corpus, the engine following 1.37; v1.36.3: the
# compatibility corpus, the engine following 1.36); cached in
# ~/.cache/kubeacc/allocator-<release>-<hash>, seconds when the module cache is warm.
.venv/bin/python -m kubeacc.differential.build 1.37
.venv/bin/python -m kubeacc.differential.build 1.36
# kube-scheduler's selector CEL (cel-go + the Kubernetes libraries, v1.37.2) as a C shared
# library (tools/celgo) that the engine loads for selectors past its evaluator's iteration cap
# (docs/placement.md, "Long comprehensions"); cached in ~/.cache/kubeacc/celgo-<release>-<hash>
# and linked from ~/.cache/kubeacc/celgo/; ~2 min cold on 2 cores, seconds cached.
.venv/bin/python -m kubeacc.differential.build celgo
# helm for the chart tests, from its Go module (tools/helm), cached in ~/.cache/kubeacc/helm-*.
.venv/bin/python -m kubeacc.testbed helm
# The compatibility lane: Kubernetes 1.36 (testbed-1.36/), a documented subset of the cluster
# tests (docs/testing.md, "Compatibility lane"; the list is tests/lane-1.36.txt). Only for a whole
# run: a run of chosen tests ("$@") is about the main lane. Its own cold build (~11 CPU-minutes)
# runs in the background at the lowest priority while the main lane runs, whose cluster tests
# leave the CPU idle much of the time; seconds when cached. Its own process group, so that an
# early exit stops the whole build.
# Volcano's scheduler and controller manager (the tests under tests/volcano run kube-acc under
# Volcano) from the pinned source tarball ../shared/peers/volcano-*.tar.gz, cached in
# ~/.cache/kubeacc/volcano-*: its cold build (~6 min on 2 idle cores, module downloads included)
# also runs in the background at the lowest priority; tests/volcano comes late in the run and
# waits for it (the build's lock) if it is still going. Seconds when cached.
# OpenStack Cyborg and Placement for the Cyborg lane (tests/agent/dra/cyborg, run kube-acc on
# Cyborg), from PyPI into a venv of their own (they pin their own oslo and eventlet), cached in
# ~/.cache/kubeacc/cyborg-*: ~1.5 min cold on a loaded 2-core machine (104 distributions, 36 s
# of CPU; docs/benchmarks.md), also in the background; the Cyborg tests' fixture waits for it
# (its lock) or, in a run of chosen tests, installs it itself. Nothing when cached.
lane_build=""
volcano_build=""
cyborg_build=""
if [ $# -eq 0 ]; then
  lane_log=$(mktemp)
  KUBEACC_K8S_VERSION=1.36 setsid nice -n 19 .venv/bin/python -m kubeacc.testbed build \
    >"$lane_log" 2>&1 &
  lane_build=$!
  volcano_log=$(mktemp)
  setsid nice -n 19 .venv/bin/python -m kubeacc.testbed volcano >"$volcano_log" 2>&1 &
  volcano_build=$!
  cyborg_log=$(mktemp)
  setsid nice -n 19 .venv/bin/python -m kubeacc.testbed cyborg >"$cyborg_log" 2>&1 &
  cyborg_build=$!
  trap 'for b in $lane_build $volcano_build $cyborg_build; do kill -- "-$b" "$b" 2>/dev/null || true; done' EXIT
fi
# --durations: the slowest tests in the log, to see where CI time goes.
.venv/bin/python -m pytest --durations=30 "$@"
# A background build's end: its log, and its exit status as the script's if it failed.
finish_build() { # PID LOG WHAT
  local rc=0
  wait "$1" || rc=$?
  cat "$2"
  if [ "$rc" -ne 0 ]; then
    echo "the $3 build failed (exit $rc)" >&2
    exit "$rc"
  fi
}
if [ $# -eq 0 ]; then
  finish_build "$volcano_build" "$volcano_log" Volcano
  volcano_build=""
  finish_build "$cyborg_build" "$cyborg_log" "Cyborg venv"
  cyborg_build=""
  finish_build "$lane_build" "$lane_log" "Kubernetes 1.36 testbed"
  lane_build=""
  export KUBEACC_K8S_VERSION=1.36
  mapfile -t lane < <(grep -v '^#' tests/lane-1.36.txt | grep .)
  .venv/bin/python -m pytest --durations=10 -m cluster "${lane[@]}"
fi
