#!/usr/bin/env bash
# Regenerates the Python modules of the kubelet gRPC APIs (kubeacc/agent/kubeletapi/*.proto).
# The generated files are committed, so installing kube-acc needs no code generator.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/python -m pip install -q "grpcio-tools==1.85.1" "mypy-protobuf>=3.6"
PATH="$PWD/.venv/bin:$PATH" .venv/bin/python -m grpc_tools.protoc -I . \
  --python_out=. --grpc_python_out=. --mypy_out=. --mypy_grpc_out=. \
  kubeacc/agent/kubeletapi/*.proto
