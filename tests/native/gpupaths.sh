#!/bin/bash
# The issue-44 paths on a real GPU (docs/sharing.md, "On a real GPU"): builds the share-limit
# library (or takes LIBRARY=<path>, e.g. a previous revision's) and tests/native/gpupaths.c
# against the machine's libcuda.so.1, then runs each case without and with a 4096 MiB share
# (container account in a temporary directory). Needs cc and the NVIDIA driver.
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
for what in vmm graph fork dl; do
  echo "=== $what, without the library"
  timeout 60 "$O/gpupaths" "$what" 2>&1
  echo "=== $what, with the library (4096 MiB share, container account)"
  LD_PRELOAD=$LIB KUBEACC_DEVICE_MEMORY_LIMIT=4096 KUBEACC_SHARELIMIT_ID=gpu-$what \
    KUBEACC_SHARELIMIT_DIR=$O timeout 60 "$O/gpupaths" "$what" 2>&1
done
