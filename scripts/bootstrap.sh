#!/usr/bin/env bash
# Creates .venv and installs kube-acc with its test tools. Idempotent; needs PyPI and, once,
# the Debian archive (runc and busybox-static for the testbed's real container runtime,
# rabbitmq-server for the Cyborg lane, faketime for the fault runner's clock steps, fuse3 for
# the power-loss tests).
set -euo pipefail
cd "$(dirname "$0")/.."
# The real-runtime testbed (kubeacc/testbed/runtime.py) runs containers with Debian's runc and
# builds its images from Debian's statically linked busybox.
missing=()
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || missing+=(runc)
[ -x /bin/busybox ] || missing+=(busybox-static)
# The power-loss tests mount the lazy file system (kubeacc/testbed/lazyfs.py) through libfuse3;
# fuse3 brings the library and fusermount3.
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
# The Cyborg lane (kubeacc/testbed/cyborgcloud.py) runs Debian's RabbitMQ for Cyborg's services.
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || missing+=(rabbitmq-server)
# The fault runner's clock steps (tests/faults/clock.py) run the agents and the controller under
# Debian's libfaketime, their wall clock shifted through a file.
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || missing+=(faketime libfaketime)
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "bootstrap: installing ${missing[*]} (apt-get)" >&2
    $sudo apt-get install -y -q "${missing[@]}" >/dev/null ||
      { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q "${missing[@]}" >/dev/null; }
  else
    echo "bootstrap: warning: ${missing[*]} missing and no apt-get; the real-runtime tests need them" >&2
  fi
fi
# Every kubelet, containerd and agent of a multi-node testbed holds inotify instances; the
# kernel's default of 128 per user runs out when the fault runner's nodes run beside other
# testbeds (a kubelet then dies with "inotify_init: too many open files"). Raised where we may.
if [ "$(cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null || echo 1024)" -lt 1024 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo 1024 >/proc/sys/fs/inotify/max_user_instances 2>/dev/null ||
      echo "bootstrap: warning: fs.inotify.max_user_instances stays low; run fewer testbeds at once" >&2
  else
    echo "bootstrap: warning: fs.inotify.max_user_instances < 1024; raise it (sysctl) for the multi-node tests" >&2
  fi
fi
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.kubeacc-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi
# The share-limit library (kubeacc/native; cached: rebuilt only when its sources change).
if ! .venv/bin/python -m kubeacc.native.build --out .cache/native >/dev/null; then
  echo "bootstrap: warning: the share-limit library did not build (needs a C compiler)" >&2
fi
