#!/bin/bash
# The issue-44 paths on a real GPU (docs/sharing.md, "On a real GPU"): builds the share-limit
# library (or takes LIBRARY=<path>, e.g. a previous revision's) and tests/native/gpupaths.c
# against the machine's libcuda.so.1, then runs each case without and with a 4096 MiB share
# (container account: the accounting service, started here). Needs cc, python3 and the driver.
set -u
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
O=$(mktemp -d)
trap 'rm -rf "$O"' EXIT
LIB=${LIBRARY:-$O/libkubeacc-sharelimit.so}
if [ -z "${LIBRARY:-}" ]; then
  cc -std=c11 -O2 -fPIC -shared -Wall -Wextra -Werror -fvisibility=hidden -Wl,-Bsymbolic \
    -Wl,-soname,libkubeacc-sharelimit.so -o "$LIB" kubeacc/native/sharelimit.c -ldl -lpthread || exit 1
fi
cc -std=c11 -O2 -Wall -Wextra -Werror -Ikubeacc/native -o "$O/gpupaths" tests/native/gpupaths.c \
  -l:libcuda.so.1 -ldl || exit 1
# The container account: the agent's accounting service (kubeacc/node/shareaccount.py, standard
# library only: loaded by path, no virtual environment needed), one share per case.
python3 - "$O/acc" vmm graph fork dl <<'PY' &
import importlib.util, signal, sys
spec = importlib.util.spec_from_file_location("shareaccount", "kubeacc/node/shareaccount.py")
mod = importlib.util.module_from_spec(spec)
sys.modules["shareaccount"] = mod
spec.loader.exec_module(mod)
service = mod.AccountService(__import__("pathlib").Path(sys.argv[1]))
for name in sys.argv[2:]:
    service.open(name, "4096")
service.start()
signal.pause()
PY
SERVICE=$!
trap 'kill $SERVICE 2>/dev/null; rm -rf "$O"' EXIT
for i in $(seq 50); do [ -S "$O/acc/dl/account.sock" ] && break; sleep 0.1; done
for what in vmm graph fork dl; do
  echo "=== $what, without the library"
  timeout 60 "$O/gpupaths" "$what" 2>&1
  echo "=== $what, with the library (4096 MiB share, container account)"
  LD_PRELOAD=$LIB KUBEACC_DEVICE_MEMORY_LIMIT=4096 \
    KUBEACC_SHARELIMIT_SOCKET=$O/acc/$what/account.sock timeout 60 "$O/gpupaths" "$what" 2>&1
done
