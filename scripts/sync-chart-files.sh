#!/usr/bin/env bash
# Copies the manifests the Helm chart shares with deploy/ into charts/kubeacc/files/.
# deploy/ is the source; tests/charts/test_chart.py fails while the copies differ.
set -euo pipefail
cd "$(dirname "$0")/.."
files=charts/kubeacc/files
rm -rf "$files"
mkdir -p "$files/crds" "$files/rbac"
cp deploy/crds/*.yaml "$files/crds/"
cp deploy/rbac/agent.yaml deploy/rbac/controller.yaml deploy/rbac/extender.yaml "$files/rbac/"
cp deploy/admission/agent-node-restriction.yaml deploy/admission/extender-decisions.yaml "$files/"
cp -L deploy/dra-deviceclasses.yaml "$files/deviceclasses.yaml"
cp deploy/grafana/kubeacc-dashboard.json "$files/"
