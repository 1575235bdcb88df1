#!/usr/bin/env bash
# The whole test suite: lint, types, then every test (the real-Kubernetes ones included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/ruff check kubeacc tests bench
.venv/bin/ruff format --check kubeacc tests bench
.venv/bin/mypy kubeacc
.venv/bin/python -m pytest "$@"
