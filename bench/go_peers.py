"""The Go peers the node daemons are measured beside, and how a benchmark starts them.

Both are upstream programs of ``k8s.io/kubernetes`` v1.37.2, built unchanged by
:mod:`kubeacc.testbed.peers` (``python -m kubeacc.testbed peers``, cached):

- the sample device plugin registers at the kubelet's fixed socket path
  ``/var/lib/kubelet/device-plugins/kubelet.sock``; :func:`in_plugin_dir` runs a command in a
  mount namespace of its own with the benchmark's directory bound there (the testbed's kubelet
  does the same for that path). A benchmark that compares start times runs kube-acc's device
  plugin through the same wrapper, so both pay for ``unshare``, ``sh`` and ``mount``;
- the DRA test driver takes its directories and the node as flags, and reads claims through a
  kubeconfig (the ``KUBECONFIG`` variable would override the flag, so it is dropped).
"""

from __future__ import annotations

import os
from pathlib import Path

from kubeacc.testbed.peers import ensure_built

#: The sample plugin's resource and its two devices (test/images/sample-device-plugin).
SAMPLE_RESOURCE = "example.com/resource"
SAMPLE_DEVICES = ["Dev-1", "Dev-2"]
#: The DRA test driver's default driver name (its ``--drivername``).
TEST_DRIVER = "test-driver.cdi.k8s.io"
#: Where the kubelet's device-plugin directory is, fixed in the sample plugin.
KUBELET_DP_DIR = "/var/lib/kubelet/device-plugins"


def peer(name: str) -> Path:
    """The built peer ``sample-device-plugin`` or ``test-driver``."""
    return ensure_built() / name


def in_plugin_dir(plugin_dir: Path, argv: list[str]) -> list[str]:
    """``argv`` in a private mount namespace where ``plugin_dir`` is the kubelet's
    device-plugin directory; the command keeps the process (``exec``), so its PID is the one
    ``Popen`` returns."""
    script = f'mkdir -p {KUBELET_DP_DIR} && mount --bind "$0" {KUBELET_DP_DIR} && exec "$@"'
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        str(plugin_dir),
        *argv,
    ]


def test_driver_argv(
    kubeconfig: Path, node: str, kubelet_root: Path, cdi: Path, qps: int | None = None
) -> list[str]:
    """The DRA test driver as a kubelet plugin of ``node``, its sockets under
    ``kubelet_root`` as the kubelet lays them out (``plugins_registry/``, ``plugins/<driver>``).

    ``qps``: its client's rate limit (QPS and burst; its default is 50 and 100). A benchmark of
    back-to-back prepares sets it high: at the default, each prepare's claim read waits for the
    client-side limiter once the burst is spent, which times the limiter, not the call."""
    limit = [] if qps is None else [f"--kube-api-qps={qps}", f"--kube-api-burst={qps}"]
    return [
        str(peer("test-driver")),
        f"--kubeconfig={kubeconfig}",
        *limit,
        "kubelet-plugin",
        f"--node-name={node}",
        f"--plugin-registration-path={kubelet_root / 'plugins_registry'}",
        f"--datadir={kubelet_root / 'plugins'}",
        f"--cdi-dir={cdi}",
    ]


def peer_env() -> dict[str, str]:
    """The environment for a peer: this one without ``KUBECONFIG``."""
    return {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
