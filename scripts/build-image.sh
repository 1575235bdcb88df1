#!/usr/bin/env bash
# Builds the kube-acc image without a container engine or registry: the same image as
# Containerfile (Debian bookworm, its python3, kube-acc in a venv at /opt/kubeacc, user 65532),
# with mmdebstrap (root file system from the Debian mirror) and umoci (OCI image layout).
# Needs root, the Debian packages mmdebstrap and umoci, and PyPI for the wheels.
#
#   scripts/build-image.sh [OUT_DIR]      (default build/image)
#
# Output: OUT_DIR/oci (OCI image layout, tag <version>) and OUT_DIR/kubeacc-<version>.oci.tar
# (load with `podman load -i`, `skopeo copy oci-archive:... docker://...` or
# `ctr -n k8s.io images import`). Reproducible: file times come from the last commit
# (SOURCE_DATE_EPOCH), the packages from the Debian snapshot of that moment when
# DEBIAN_SNAPSHOT=1.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in mmdebstrap umoci; do
  command -v "$tool" >/dev/null || { echo "error: $tool missing (apt-get install $tool)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "error: run as root (mmdebstrap, umoci unpack)" >&2; exit 2; }
out=${1:-build/image}
py=${PYTHON:-python3}
version=$("$py" -c 'import tomllib; print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])')
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
mirror=http://deb.debian.org/debian
if [ "${DEBIAN_SNAPSHOT:-0}" = 1 ]; then
  mirror="http://snapshot.debian.org/archive/debian/$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y%m%dT%H%M%SZ)"
fi
start=$(date +%s)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "[image] wheels for kube-acc $version (Python 3.11, manylinux)"
mkdir -p "$work/wheels"
"$py" -m pip wheel -q --no-deps -w "$work/wheels" .
"$py" -m pip download -q -d "$work/wheels" --only-binary=:all: \
  --python-version 3.11 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform any "$work"/wheels/kubeacc-*.whl

echo "[image] share-limit library and CDI hook (kubeacc/native, built with the host's cc)"
PYTHONPATH=. "$py" -m kubeacc.native.build --out "$work/native" >/dev/null

echo "[image] root file system (Debian bookworm from $mirror)"
in_root='chroot "$1" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin'  # no host PIP_* settings inside
mmdebstrap --quiet --mode=root --variant=minbase \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --aptopt='APT::Install-Recommends "false"' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --include=python3,python3-venv,pci.ids,ca-certificates \
  --customize-hook='mkdir -p "$1/tmp/wheels"' \
  --customize-hook="copy-in $work/wheels/. /tmp/wheels" \
  --customize-hook="$in_root python3 -m venv /opt/kubeacc" \
  --customize-hook="$in_root /opt/kubeacc/bin/pip install -q --no-index --no-cache-dir --find-links /tmp/wheels kubeacc" \
  --customize-hook='mkdir -p "$1/opt/kubeacc/native"' \
  --customize-hook="copy-in $work/native/libkubeacc-sharelimit.so /opt/kubeacc/native" \
  --customize-hook="copy-in $work/native/kubeacc-cdi-hook /opt/kubeacc/native" \
  --customize-hook="copy-in $work/native/kubeacc-cuda-smoke /opt/kubeacc/native" \
  --customize-hook="$in_root /opt/kubeacc/bin/pip uninstall -q -y setuptools pip" \
  --customize-hook="$in_root apt-get purge -qq -y --autoremove python3-venv python3.11-venv python3-pip-whl python3-setuptools-whl >/dev/null" \
  --customize-hook='find "$1/opt/kubeacc" -name __pycache__ -prune -exec rm -rf {} +' \
  --customize-hook="$in_root /opt/kubeacc/bin/python3 -m compileall -q --invalidation-mode unchecked-hash /opt/kubeacc/lib" \
  --customize-hook='rm -rf "$1"/tmp/wheels "$1"/var/lib/apt/lists/* "$1"/var/cache/* "$1"/var/log/*' \
  --customize-hook='echo "kubeacc:x:65532:65532:kube-acc:/nonexistent:/usr/sbin/nologin" >> "$1/etc/passwd"; echo "kubeacc:x:65532:" >> "$1/etc/group"' \
  bookworm "$work/rootfs.tar" "$mirror"

echo "[image] OCI image"
rm -rf "$out/oci" && mkdir -p "$out"
umoci init --layout "$out/oci"
umoci new --image "$out/oci:$version"
umoci unpack --image "$out/oci:$version" "$work/bundle" >/dev/null
tar -xf "$work/rootfs.tar" -C "$work/bundle/rootfs" --exclude=./dev/*
umoci repack --image "$out/oci:$version" "$work/bundle"
umoci config --image "$out/oci:$version" \
  --config.entrypoint kubeacc --config.cmd=--help \
  --config.env PATH=/opt/kubeacc/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env PYTHONDONTWRITEBYTECODE=1 \
  --config.user 65532:65532 \
  --config.label org.opencontainers.image.title=kube-acc \
  --config.label "org.opencontainers.image.version=$version" \
  --created "$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)" \
  --history.created "$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
umoci gc --layout "$out/oci"
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
  -C "$out/oci" -cf "$out/kubeacc-$version.oci.tar" .

echo "[image] check: kubeacc version inside the image, as user 65532"
umoci unpack --image "$out/oci:$version" "$work/check" >/dev/null
inside=$(chroot --userspec=65532:65532 "$work/check/rootfs" /opt/kubeacc/bin/kubeacc version)
[ "$inside" = "$version" ] || { echo "error: kubeacc version in the image says '$inside'" >&2; exit 1; }
size=$(du -m "$out/kubeacc-$version.oci.tar" | cut -f1)
rootfs=$(du -sm "$work/check/rootfs" | cut -f1)
echo "[image] kubeacc:$version built in $(( $(date +%s) - start )) s:" \
  "$out/kubeacc-$version.oci.tar ${size} MiB (compressed layers), root file system ${rootfs} MiB;" \
  "kubeacc version -> $inside"
