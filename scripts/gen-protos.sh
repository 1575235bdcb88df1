#!/usr/bin/env bash
# Regenerates the Python modules of the kubelet gRPC APIs (kubeacc/node/kubeletapi/*.proto).
# The generated files are committed, so installing kube-acc needs no code generator.
#
#   kubeacc/node/kubeletapi/*_pb2.py(i)  protobuf messages
#   kubeacc/node/kubeletapi/*_grpc.py    grpclib services and stubs (what the agent serves)
#   tests/kubeletclient/*_pb2_grpc.py     grpcio stubs: the tests and benchmarks play the
#                                         kubelet with a second, independent gRPC implementation
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/python -m pip install -q "grpcio-tools==1.85.1" "mypy-protobuf>=3.6"
protos=(kubeacc/node/kubeletapi/*.proto)
PATH="$PWD/.venv/bin:$PATH" .venv/bin/python -m grpc_tools.protoc -I . \
  --python_out=. --mypy_out=. --grpclib_python_out=. "${protos[@]}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
.venv/bin/python -m grpc_tools.protoc -I . --grpc_python_out="$tmp" "${protos[@]}"
mkdir -p tests/kubeletclient
cp "$tmp"/kubeacc/node/kubeletapi/*_pb2_grpc.py tests/kubeletclient/
