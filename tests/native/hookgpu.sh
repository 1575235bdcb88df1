#!/bin/bash
# kubeacc-cdi-hook on a node with a real NVIDIA driver (docs/dra.md, "Driver user space"): a
# container root holding the host's C library and the driver's libraries where the CDI mounts
# put them, the hook run as runc runs it (state on stdin), then the conformance kit's smoke
# program chrooted there: dlopen("libcuda.so.1") through the ld cache the hook's sandboxed
# ldconfig made, cuInit, a context, an allocation. The hook runs first with no --ldconfig (the
# host's /sbin/ldconfig, as a spec of an older agent), then with each static ldconfig found.
# Needs root, cc and the driver (DRIVER_ROOT, default /usr/local/nvidia, else /).
set -u
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "kernel $(uname -r)"
O=$(mktemp -d)
trap 'umount -R "$O"/bundle/rootfs/* 2>/dev/null; rm -rf "$O"' EXIT
cc -std=c11 -O2 -Wall -Wextra -Werror -static -o "$O/hook" kubeacc/native/cdihook.c || exit 1
cc -std=c11 -O2 -Wall -Wextra -Werror -Ikubeacc/native -o "$O/smoke" kubeacc/native/cudasmoke.c \
  -ldl -lpthread || exit 1
DRV=${DRIVER_ROOT:-/usr/local/nvidia}
CUDA=$(ls "$DRV"/lib64/libcuda.so.*.* "$DRV"/lib/x86_64-linux-gnu/libcuda.so.*.* \
  /usr/lib/x86_64-linux-gnu/libcuda.so.*.* 2>/dev/null | head -1)
[ -n "$CUDA" ] || { echo "no libcuda.so.<version> under $DRV"; exit 1; }
VER=${CUDA##*libcuda.so.}
SRC=$(dirname "$CUDA")
echo "driver libraries: $SRC, version $VER"
L=usr/lib/x86_64-linux-gnu
R=$O/bundle/rootfs
mkdir -p "$R/$L" "$R/lib64" "$R/etc" "$R/dev" "$R/proc" "$R/sys" "$R/tmp" "$R/opt"
for f in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1; do
  cp -L "/lib/x86_64-linux-gnu/$f" "$R/$L/" 2>/dev/null || cp -L "/usr/lib64/$f" "$R/$L/"
done
cp -L /lib64/ld-linux-x86-64.so.2 "$R/lib64/"
for f in "$SRC"/lib*.so."$VER"; do cp -L "$f" "$R/$L/"; done
cp "$O/smoke" "$R/opt/smoke"
echo '{"ociVersion":"1.2.0","root":{"path":"rootfs"}}' >"$O/bundle/config.json"
LINKS=(--link "libcuda.so.$VER::/$L/libcuda.so.1" --link "libcuda.so.1::/$L/libcuda.so"
  --link "libnvidia-ml.so.$VER::/$L/libnvidia-ml.so.1")
run_hook() {
  local t0 t1 rc
  t0=$(date +%s%N)
  echo "{\"bundle\":\"$O/bundle\",\"id\":\"gpu\"}" | "$O/hook" update-ldcache "$@" \
    --folder "/$L" "${LINKS[@]}"
  rc=$?
  t1=$(date +%s%N)
  echo "hook rc=$rc in $(((t1 - t0) / 1000)) us"
  return $rc
}
echo "=== the hook with the host's /sbin/ldconfig (no --ldconfig)"
ls -l /sbin/ldconfig* /usr/sbin/ldconfig* 2>/dev/null
run_hook
for ldc in /sbin/ldconfig.real /sbin/ldconfig /usr/sbin/ldconfig; do
  [ -f "$ldc" ] || continue
  rm -f "$R/etc/ld.so.cache"
  echo "=== the hook with --ldconfig $ldc"
  run_hook --ldconfig "$ldc" || continue
  "$ldc" -p -C "$R/etc/ld.so.cache" 2>&1 | grep -E 'libcuda|libnvidia-ml' | head -4
  echo "=== the smoke program in that root, by the ld cache alone"
  unshare -m sh -c "mount --rbind /dev '$R/dev' && mount -t proc proc '$R/proc' &&
    mount --rbind /sys '$R/sys' && exec chroot '$R' /opt/smoke 64"
  echo "smoke rc=$?"
  break
done
