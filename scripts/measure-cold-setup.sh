#!/usr/bin/env bash
# Times every set-up step of scripts/test.sh as CI would run it on a machine that has built
# nothing: a fresh clone of this repository's HEAD, with HOME pointed at an empty directory (no
# pip cache, Go module or build cache, ~/.cache/kubeacc). Prints one line per step: wall time,
# CPU time (user, sys) and the load before and after. Needs ~15 GB free under $WORK.
# Usage: scripts/measure-cold-setup.sh [WORK]   (default /tmp/kubeacc-cold)
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/kubeacc-cold}
rm -rf "$work" && mkdir -p "$work/home/.config/go"
# The Go settings of this machine (GOFLAGS, GOTOOLCHAIN) live under HOME; keep them.
[ -f "$HOME/.config/go/env" ] && cp "$HOME/.config/go/env" "$work/home/.config/go/env"
git clone -q "$repo" "$work/repo" && cd "$work/repo" || exit 1
export HOME="$work/home" CI=true
echo "head $(git rev-parse --short HEAD) start $(date -u +%H:%M:%S)"
step() {
  local start load0 rc
  start=$(date +%s) load0=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -f "%U %S" -o "$work/time" "$@" >>"$work/setup.log" 2>&1
  rc=$?
  echo "$* rc=$rc wall=$(($(date +%s) - start))s cpu(user sys)=$(tail -1 "$work/time") load=$load0..$(cut -d' ' -f1 /proc/loadavg)"
}
step bash scripts/bootstrap.sh
unset KUBEACC_K8S_VERSION
step .venv/bin/python -m kubeacc.testbed build
step .venv/bin/python -m kubeacc.testbed runtime
step .venv/bin/python -m kubeacc.testbed image
step .venv/bin/python -m kubeacc.differential.build 1.36
step .venv/bin/python -m kubeacc.differential.build 1.37
step .venv/bin/python -m kubeacc.testbed helm
step .venv/bin/python -m kubeacc.testbed cyborg
KUBEACC_K8S_VERSION=1.36 step .venv/bin/python -m kubeacc.testbed build
echo "end $(date -u +%H:%M:%S) (log: $work/setup.log)"
