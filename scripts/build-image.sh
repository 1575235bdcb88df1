#!/usr/bin/env bash
# Builds the kube-acc image without a container engine or registry: the same image as
# Containerfile (Debian bookworm, its python3, kube-acc in a venv at /opt/kubeacc, user 65532),
# for linux/amd64 and linux/arm64, with mmdebstrap (root file system from the Debian mirror) and
# umoci (OCI image layout). Needs root, the Debian packages mmdebstrap and umoci, PyPI for the
# wheels, and for a platform other than the machine's: qemu-user-static with binfmt_misc (the
# chroot steps run under emulation) and the cross compiler gcc-<triplet> (the native library and
# the hook).
#
#   scripts/build-image.sh [--platform linux/amd64,linux/arm64] [--dry-run] [OUT_DIR]
#
# Output: OUT_DIR/oci, an OCI image layout with one image per platform (tags <version>-amd64,
# <version>-arm64) and an image index (multi-arch manifest, tag <version>) naming them, and its
# archive OUT_DIR/kubeacc-<version>.oci.tar (`skopeo copy --all oci-archive:... docker://...`,
# `ctr -n k8s.io images import --all-platforms`). Reproducible: file times come from the last
# commit (SOURCE_DATE_EPOCH), the packages from the Debian snapshot of that moment when
# DEBIAN_SNAPSHOT=1. --dry-run prints, per platform, the tools and settings it would use, and
# builds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

platforms=linux/amd64,linux/arm64
dry_run=0
out=
while [ $# -gt 0 ]; do
  case "$1" in
    --platform) [ $# -ge 2 ] || { echo "error: --platform needs a value" >&2; exit 2; }; platforms=$2; shift 2 ;;
    --platform=*) platforms=${1#--platform=}; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "error: unknown option $1" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "error: one OUT_DIR only" >&2; exit 2; }; out=$1; shift ;;
  esac
done
out=${out:-build/image}

# Per Debian architecture: the OCI architecture, the wheel platform tags, the C compiler.
native_arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
declare -A triplet=([amd64]=x86_64-linux-gnu [arm64]=aarch64-linux-gnu)
declare -A wheel_machine=([amd64]=x86_64 [arm64]=aarch64)
declare -A qemu=([arm64]=qemu-aarch64 [amd64]=qemu-x86_64)
archs=()
IFS=, read -r -a requested <<<"$platforms"
for p in "${requested[@]}"; do
  case "$p" in
    linux/amd64) a=amd64 ;;
    linux/arm64|linux/arm64/v8) a=arm64 ;;
    *) echo "error: platform $p not supported (linux/amd64, linux/arm64)" >&2; exit 2 ;;
  esac
  for seen in "${archs[@]}"; do [ "$seen" != "$a" ] || { echo "error: platform $p given twice" >&2; exit 2; }; done
  archs+=("$a")
done
[ ${#archs[@]} -gt 0 ] || { echo "error: no platform given" >&2; exit 2; }

cc_for() {  # the C compiler for Debian architecture $1
  if [ "$1" = "$native_arch" ]; then echo "${CC:-cc}"; else echo "${triplet[$1]}-gcc"; fi
}

if [ "$dry_run" = 1 ]; then
  for a in "${archs[@]}"; do
    m=${wheel_machine[$a]}
    emulated=no; [ "$a" = "$native_arch" ] || emulated="yes (${qemu[$a]}, binfmt_misc)"
    echo "platform linux/$a: mmdebstrap --architectures=$a; cc $(cc_for "$a");" \
      "wheels manylinux2014_$m manylinux_2_28_$m manylinux_2_17_$m; emulated: $emulated;" \
      "tag <version>-$a"
  done
  echo "index: <version> -> ${archs[*]}"
  exit 0
fi

for tool in mmdebstrap umoci; do
  command -v "$tool" >/dev/null || { echo "error: $tool missing (apt-get install $tool)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "error: run as root (mmdebstrap, umoci unpack)" >&2; exit 2; }
for a in "${archs[@]}"; do
  [ "$a" != "$native_arch" ] || continue
  command -v "$(cc_for "$a")" >/dev/null \
    || { echo "error: $(cc_for "$a") missing (apt-get install gcc-${triplet[$a]} libc6-dev-$a-cross)" >&2; exit 2; }
  [ -e "/proc/sys/fs/binfmt_misc/${qemu[$a]}" ] || {
    echo "error: no binfmt_misc entry ${qemu[$a]}: apt-get install qemu-user-static binfmt-support;" \
      "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; update-binfmts --enable ${qemu[$a]}" >&2
    exit 2
  }
done

py=${PYTHON:-python3}
version=$("$py" -c 'import tomllib; print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])')
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
mirror=http://deb.debian.org/debian
if [ "${DEBIAN_SNAPSHOT:-0}" = 1 ]; then
  mirror="http://snapshot.debian.org/archive/debian/$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y%m%dT%H%M%SZ)"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out/oci" && mkdir -p "$out"
umoci init --layout "$out/oci"

echo "[image] kube-acc $version wheel"
mkdir -p "$work/kubeacc-wheel"
"$py" -m pip wheel -q --no-deps -w "$work/kubeacc-wheel" .

build_arch() {  # one image, for Debian architecture $1, tag <version>-$1
  local a=$1 m=${wheel_machine[$1]} start
  start=$(date +%s)
  local w="$work/$a" tag="$version-$a"
  mkdir -p "$w/wheels"
  cp "$work"/kubeacc-wheel/*.whl "$w/wheels/"
  echo "[image $a] wheels (Python 3.11, manylinux $m)"
  "$py" -m pip download -q -d "$w/wheels" --only-binary=:all: \
    --python-version 3.11 --platform "manylinux2014_$m" --platform "manylinux_2_28_$m" \
    --platform "manylinux_2_17_$m" --platform any "$w"/wheels/kubeacc-*.whl

  echo "[image $a] share-limit library, CDI hook, CUDA smoke program (kubeacc/native, $(cc_for "$a"))"
  CC=$(cc_for "$a") PYTHONPATH=. "$py" -m kubeacc.native.build --out "$w/native" >/dev/null

  echo "[image $a] root file system (Debian bookworm $a from $mirror)"
  local in_root='chroot "$1" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin'  # no host PIP_* settings inside
  mmdebstrap --quiet --mode=root --variant=minbase --architectures="$a" \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --include=python3,python3-venv,pci.ids,ca-certificates \
    --customize-hook='mkdir -p "$1/tmp/wheels"' \
    --customize-hook="copy-in $w/wheels/. /tmp/wheels" \
    --customize-hook="$in_root python3 -m venv /opt/kubeacc" \
    --customize-hook="$in_root /opt/kubeacc/bin/pip install -q --no-index --no-cache-dir --find-links /tmp/wheels kubeacc" \
    --customize-hook='mkdir -p "$1/opt/kubeacc/native"' \
    --customize-hook="copy-in $w/native/libkubeacc-sharelimit.so /opt/kubeacc/native" \
    --customize-hook="copy-in $w/native/kubeacc-cdi-hook /opt/kubeacc/native" \
    --customize-hook="copy-in $w/native/kubeacc-cuda-smoke /opt/kubeacc/native" \
    --customize-hook="$in_root /opt/kubeacc/bin/pip uninstall -q -y setuptools pip" \
    --customize-hook="$in_root apt-get purge -qq -y --autoremove python3-venv python3.11-venv python3-pip-whl python3-setuptools-whl >/dev/null" \
    --customize-hook='find "$1/opt/kubeacc" -name __pycache__ -prune -exec rm -rf {} +' \
    --customize-hook="$in_root /opt/kubeacc/bin/python3 -m compileall -q --invalidation-mode unchecked-hash /opt/kubeacc/lib" \
    --customize-hook='rm -rf "$1"/tmp/wheels "$1"/var/lib/apt/lists/* "$1"/var/cache/* "$1"/var/log/*' \
    --customize-hook='echo "kubeacc:x:65532:65532:kube-acc:/nonexistent:/usr/sbin/nologin" >> "$1/etc/passwd"; echo "kubeacc:x:65532:" >> "$1/etc/group"' \
    bookworm "$w/rootfs.tar" "$mirror"

  echo "[image $a] OCI image $tag"
  umoci new --image "$out/oci:$tag"
  umoci unpack --image "$out/oci:$tag" "$w/bundle" >/dev/null
  tar -xf "$w/rootfs.tar" -C "$w/bundle/rootfs" --exclude=./dev/*
  umoci repack --image "$out/oci:$tag" "$w/bundle"
  rm -rf "$w/bundle" "$w/rootfs.tar"
  umoci config --image "$out/oci:$tag" --architecture "$a" --os linux \
    --config.entrypoint kubeacc --config.cmd=--help \
    --config.env PATH=/opt/kubeacc/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env PYTHONDONTWRITEBYTECODE=1 \
    --config.user 65532:65532 \
    --config.label org.opencontainers.image.title=kube-acc \
    --config.label "org.opencontainers.image.version=$version" \
    --created "$created" --history.created "$created"

  echo "[image $a] check: kubeacc version inside the image, as user 65532$([ "$a" = "$native_arch" ] || echo ", under ${qemu[$a]}")"
  umoci unpack --image "$out/oci:$tag" "$w/check" >/dev/null
  local inside rootfs
  inside=$(chroot --userspec=65532:65532 "$w/check/rootfs" /opt/kubeacc/bin/kubeacc version)
  [ "$inside" = "$version" ] || { echo "error: kubeacc version in the $a image says '$inside'" >&2; exit 1; }
  rootfs=$(du -sm "$w/check/rootfs" | cut -f1)
  rm -rf "$w/check"
  echo "[image $a] $tag built in $(( $(date +%s) - start )) s, root file system ${rootfs} MiB"
}

for a in "${archs[@]}"; do build_arch "$a"; done
umoci gc --layout "$out/oci"

echo "[image] index (multi-arch manifest) $version: ${archs[*]}"
"$py" - "$out/oci" "$version" "${archs[@]}" <<'PY'
import hashlib, json, sys
from pathlib import Path
layout, version, archs = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
top = json.loads((layout / "index.json").read_text())
by_tag = {m["annotations"]["org.opencontainers.image.ref.name"]: m for m in top["manifests"]}
entries = []
for a in archs:
    m = dict(by_tag[f"{version}-{a}"])
    m.pop("annotations", None)
    m["platform"] = {"architecture": a, "os": "linux"}
    entries.append(m)
index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": entries}
blob = json.dumps(index, separators=(",", ":"), sort_keys=True).encode()
digest = hashlib.sha256(blob).hexdigest()
(layout / "blobs/sha256" / digest).write_bytes(blob)
top["manifests"] = [m for m in top["manifests"] if m["annotations"]["org.opencontainers.image.ref.name"] != version]
top["manifests"].append({
    "mediaType": index["mediaType"], "digest": f"sha256:{digest}", "size": len(blob),
    "annotations": {"org.opencontainers.image.ref.name": version},
})
(layout / "index.json").write_text(json.dumps(top, separators=(",", ":"), sort_keys=True))
PY
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
  -C "$out/oci" -cf "$out/kubeacc-$version.oci.tar" .
size=$(du -m "$out/kubeacc-$version.oci.tar" | cut -f1)
echo "[image] $out/kubeacc-$version.oci.tar: ${size} MiB (compressed layers of ${archs[*]}), index tag $version"
