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
.venv/bin/python -m kubeacc.testbed build
# The real container runtime (containerd, its shim, ctr, CNI bridge/host-local/loopback) from
# tools/containerd, cached in ~/.cache/kubeacc/containerd-*; ~2-3 min cold, seconds warm.
.venv/bin/python -m kubeacc.testbed runtime
# The kube-acc image for the chart's pods on the real runtime, made from this Python and the
# source tree (no registry, no Debian mirror), cached in ~/.cache/kubeacc/kubeacc-image-*; ~3 s.
.venv/bin/python -m kubeacc.testbed image
# kube-scheduler's allocator as a small Go program (tools/allocator) for the differential tests;
# cached in ~/.cache/kubeacc/allocator-<hash>, seconds when the module cache is warm.
.venv/bin/python -m kubeacc.differential.build
# helm for the chart tests, from its Go module (tools/helm), cached in ~/.cache/kubeacc/helm-*.
.venv/bin/python -m kubeacc.testbed helm
.venv/bin/python -m pytest "$@"
