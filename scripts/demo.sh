#!/usr/bin/env bash
# kube-acc's main job on this machine alone: see README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/kubeacc demo "$@"
