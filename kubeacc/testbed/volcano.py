"""Build (or reuse) the Volcano batch scheduler and run it on a testbed beside kube-scheduler.

Volcano (module ``volcano.sh/volcano``) is not served by the Go module proxy; its source tree at
:data:`COMMIT` is a tarball among the project's test peers (``../shared/peers/``, or
``KUBEACC_VOLCANO_TARBALL``), unmodified. :func:`ensure_built` unpacks it and runs one
``go build ./cmd/scheduler ./cmd/controller-manager`` (every dependency from the module proxy
under Volcano's own ``go.sum``); the two programs and the CustomResourceDefinitions of its
``config/crd/volcano/bases`` and ``config/crd/jobflow/bases`` (the controller manager's
informers wait for every one of them) land in ``$KUBEACC_CACHE/volcano-<commit>-<hash>/``,
the hash over the tarball and the build command, and are reused from there.

:class:`Volcano` runs them against a started testbed cluster: the CRDs
(``batch.volcano.sh`` Jobs, ``scheduling.volcano.sh`` Queues and PodGroups, ...), then
``vc-scheduler`` as the scheduler of the pods that name :data:`SCHEDULER_NAME` (kube-scheduler
keeps every other pod) and ``vc-controller-manager`` (Jobs to pods and PodGroups, queues). Both
act with the testbed's admin identity. Volcano's admission webhooks are not run, so a Job is
created with every field its webhook would default (queue, schedulerName, minAvailable).
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from kubeacc.testbed.build import BuildError, cache_root, cached_go_build, repo_root, source_key
from kubeacc.testbed.kubeconfig import http_ok
from kubeacc.testbed.procs import Process, free_port, wait_for
from kubeacc.testbed.versions import LANE_1_36, feature_gate_flag

#: The Volcano commit the tarball holds (2026-08-20, on k8s.io/kubernetes v1.36.1).
COMMIT = "ed72c7c815a9fd547a787134676f73d42e9d049c"
#: The environment variable naming the source tarball (default: beside the repository).
TARBALL_ENV = "KUBEACC_VOLCANO_TARBALL"
#: ``spec.schedulerName`` of the pods Volcano schedules.
SCHEDULER_NAME = "volcano"
#: The queue the scheduler creates at start and Jobs name when they name none.
DEFAULT_QUEUE = "default"
#: What the build leaves in the cache directory (Go names a binary after its package).
SCHEDULER_BIN = "scheduler"
CONTROLLER_BIN = "controller-manager"
CRD_DIR = "crds"
_PACKAGES = ("./cmd/scheduler", "./cmd/controller-manager")

#: The scheduler's actions and plugins: admission by queue capacity (enqueue), gang placement
#: (allocate: a Job's tasks are committed together once minAvailable of them fit, else none),
#: then backfill; no preempt/reclaim, so no tenant's Job evicts another's pods. ``predicates``
#: runs kube-scheduler's filters, DynamicResourceAllocation among them.
SCHEDULER_CONF = {
    "actions": "enqueue, allocate, backfill",
    "tiers": [
        {"plugins": [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}]},
        {
            "plugins": [
                {"name": "drf"},
                {
                    "name": "predicates",
                    "arguments": {"predicate.DynamicResourceAllocationEnable": True},
                },
                {"name": "proportion"},
                {"name": "nodeorder"},
            ]
        },
    ],
}


def tarball() -> Path:
    """The source tarball: ``$KUBEACC_VOLCANO_TARBALL``, else ``shared/peers/`` beside the
    checkout or beside one of the folders above it (a clone made in a subfolder), else beside
    the repository it was cloned from or a folder above that (a clone made elsewhere)."""
    env = os.environ.get(TARBALL_ENV)
    if env:
        return Path(env)
    name = Path("shared", "peers", f"volcano-{COMMIT[:8]}.tar.gz")
    root = repo_root()
    folders = [*root.parents]
    if (origin := _local_origin(root)) is not None:  # a clone made elsewhere (CI's, /tmp)
        folders += origin.parents
    candidates = [folder / name for folder in folders]
    return next((c for c in candidates if c.is_file()), candidates[0])


def _local_origin(root: Path) -> Path | None:
    """The repository ``root`` was cloned from, where that is a folder of this machine."""
    got = subprocess.run(
        ["git", "-C", str(root), "config", "--get", "remote.origin.url"],
        capture_output=True,
        text=True,
        check=False,
    )
    url = got.stdout.strip().removeprefix("file://")
    if got.returncode != 0 or not url.startswith("/"):
        return None
    return Path(url).resolve()


def _command(out: Path) -> list[str]:
    return [
        "sh",
        "-c",
        'go build -ldflags "-s -w" -o "$1/" "$2" "$3" && mkdir "$1/$4" && '
        'cp config/crd/volcano/bases/*.yaml config/crd/jobflow/bases/*.yaml "$1/$4/"',
        "sh",
        str(out),
        *_PACKAGES,
        CRD_DIR,
    ]


def volcano_dir(source: Path | None = None) -> Path:
    """Where the build of this tarball lives (built or not)."""
    src = source or tarball()
    key = source_key([src], _command(Path("OUT"))) if src.is_file() else "missing"
    return cache_root() / f"volcano-{COMMIT[:8]}-{key}"


def _complete(target: Path) -> bool:
    return all((target / n).is_file() for n in (SCHEDULER_BIN, CONTROLLER_BIN)) and any(
        (target / CRD_DIR).glob("*.yaml")
    )


def ensure_built(source: Path | None = None) -> Path:
    """The directory holding ``scheduler``, ``controller-manager`` and ``crds/``, built first
    if needed (one builder at a time; a concurrent caller waits for it)."""
    src = source or tarball()
    target = volcano_dir(src)
    if _complete(target):
        return target
    if not src.is_file():
        raise BuildError(
            f"Volcano's source tarball is not at {src} (set {TARBALL_ENV}); the Go module "
            f"proxy does not serve volcano.sh/volcano"
        )
    with tempfile.TemporaryDirectory(prefix="kubeacc-volcano-") as tree:
        with tarfile.open(src) as tar:
            tar.extractall(tree, filter="data")
        roots = [p for p in Path(tree).iterdir() if (p / "go.mod").is_file()]
        if len(roots) != 1:
            raise BuildError(f"{src} holds no single Go module directory at its top")
        cached_go_build(
            target,
            what="Volcano's scheduler and controller manager",
            cwd=roots[0],
            command=_command,
            outputs=[SCHEDULER_BIN, CONTROLLER_BIN],
        )
    return target


@dataclass
class Volcano:
    """Volcano's scheduler and controller manager on one cluster (see the module doc)."""

    #: the cluster's work directory (scheduler configuration, cache dumps)
    workdir: Path
    logs: Path
    #: the admin kubeconfig, and the kubectl argv prefix that uses it
    kubeconfig: Path
    kubectl: list[str]
    bin_dir: Path
    #: seconds between scheduling cycles
    period: str = "200ms"
    scheduler: Process | None = None
    controller_manager: Process | None = None
    _ports: dict[str, int] = field(default_factory=dict)

    def start(self, timeout: float = 120) -> Volcano:
        """Install the CRDs, start both programs, wait until they are healthy and the default
        queue exists; on failure stop what was started."""
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def processes(self) -> list[Process]:
        return [p for p in (self.controller_manager, self.scheduler) if p is not None]

    def _start(self, timeout: float) -> None:
        self._apply_crds(timeout)
        conf = self.workdir / "volcano-scheduler.conf"
        conf.write_text(json.dumps(SCHEDULER_CONF, indent=2))  # JSON is YAML
        kubeconfig = str(self.kubeconfig)
        gates = feature_gate_flag(dict(LANE_1_36.feature_gates))
        for name in ("scheduler", "scheduler-healthz", "cm", "cm-healthz"):
            self._ports[name] = free_port()
        self.scheduler = Process(
            "vc-scheduler",
            [
                str(self.bin_dir / SCHEDULER_BIN),
                f"--kubeconfig={kubeconfig}",
                f"--scheduler-conf={conf}",
                f"--scheduler-name={SCHEDULER_NAME}",
                f"--default-queue={DEFAULT_QUEUE}",
                f"--schedule-period={self.period}",
                "--leader-elect=false",
                f"--listen-address=127.0.0.1:{self._ports['scheduler']}",
                "--enable-healthz=true",
                f"--healthz-address=127.0.0.1:{self._ports['scheduler-healthz']}",
                f"--cache-dump-dir={self.workdir / 'volcano-dump'}",
                f"--feature-gates={gates}",
                "--v=3",
            ],
            self.logs / "vc-scheduler.log",
        ).start()
        self.controller_manager = Process(
            "vc-controller-manager",
            [
                str(self.bin_dir / CONTROLLER_BIN),
                f"--kubeconfig={kubeconfig}",
                f"--scheduler-name={SCHEDULER_NAME}",
                "--leader-elect=false",
                f"--listen-address=127.0.0.1:{self._ports['cm']}",
                "--enable-healthz=true",
                f"--healthz-address=127.0.0.1:{self._ports['cm-healthz']}",
                f"--feature-gates={gates}",
                "--v=2",
            ],
            self.logs / "vc-controller-manager.log",
        ).start()
        for proc, port in (
            (self.scheduler, self._ports["scheduler-healthz"]),
            (self.controller_manager, self._ports["cm-healthz"]),
        ):
            url = f"http://127.0.0.1:{port}/healthz"
            wait_for(f"{proc.name} /healthz", partial(http_ok, url), timeout, watch=[proc])
        wait_for(
            f"Volcano queue {DEFAULT_QUEUE!r}",
            partial(self._queue_exists, DEFAULT_QUEUE),
            timeout,
            watch=self.processes(),
        )

    def _kubectl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.kubectl, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def _apply_crds(self, timeout: float) -> None:
        crds = self.bin_dir / CRD_DIR
        # server-side: the Job CRD is larger than the client-side apply annotation allows
        done = self._kubectl("apply", "--server-side", "-f", str(crds))
        if done.returncode != 0:
            raise RuntimeError(f"applying Volcano's CRDs failed: {done.stderr.strip()}")
        waited = self._kubectl(
            "wait", "--for=condition=Established", "-f", str(crds), f"--timeout={int(timeout)}s"
        )
        if waited.returncode != 0:
            raise RuntimeError(f"Volcano's CRDs never became Established: {waited.stderr}")

    def _queue_exists(self, name: str) -> bool:
        return self._kubectl("get", "queues.scheduling.volcano.sh", name).returncode == 0

    def check(self) -> None:
        """Raise (with the log tail) if either program has exited."""
        for p in self.processes():
            p.check()

    def stop(self) -> None:
        for p in self.processes():
            p.stop(5.0)
