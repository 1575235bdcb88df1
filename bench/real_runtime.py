"""The testbed's real runtime (containerd + runc + CNI): start and pod-start times.

Prints one JSON object: the runtime build (a cache hit after the first run), the start of a
one-node testbed on containerd to a Ready node, the time from creating a busybox pod to its
container running (sandbox with CNI network, container, as containerd reports it to the kubelet)
for ``pods`` pods one after another, the kube-acc image (made or reused, then imported into
the node's containerd: what the chart test does before ``helm install``), and the stop. No
target: DESIGN.md sets none; the numbers go to docs/testing.md.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Pod

from kubeacc.testbed import KubeletOptions, Testbed
from kubeacc.testbed.images import WORKLOAD_IMAGE
from kubeacc.testbed.kubeacc_image import ensure_image
from kubeacc.testbed.runtime import ensure_runtime


def _pod(name: str) -> Pod:
    obj = from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "c",
                        "image": WORKLOAD_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["sleep", "3600"],
                    }
                ],
            },
        }
    )
    assert isinstance(obj, Pod)
    return obj


def _running(client: Client, name: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = client.get(Pod, name, namespace="default")
        for st in (pod.status.containerStatuses if pod.status else None) or []:
            if st.state and st.state.running:
                return
        time.sleep(0.05)
    raise TimeoutError(f"pod {name} never ran")


def main(pods: int = 5) -> dict[str, object]:
    t0 = time.monotonic()
    ensure_runtime(out=sys.stderr)
    build_s = time.monotonic() - t0
    t0 = time.monotonic()
    tb = Testbed.start(kubelet=KubeletOptions(node_name="node-r", runtime="containerd"))
    start_s = time.monotonic() - t0
    starts: list[float] = []
    try:
        client = tb.client()
        for i in range(pods):
            t1 = time.monotonic()
            client.create(_pod(f"p{i}"))
            _running(client, f"p{i}")
            starts.append(time.monotonic() - t1)
        t1 = time.monotonic()
        image = ensure_image(out=sys.stderr)
        image_s = time.monotonic() - t1
        assert tb.kubelet.containerd is not None
        t1 = time.monotonic()
        tb.kubelet.containerd.import_image(image)
        import_s = time.monotonic() - t1
        memory = {k: round(v / 2**20, 1) for k, v in tb.memory().items() if "containerd" in k}
    finally:
        t2 = time.monotonic()
        tb.stop()
        stop_s = time.monotonic() - t2
    return {
        "benchmark": "real_runtime",
        "runtime_build_or_reuse_s": round(build_s, 2),
        "testbed_start_to_node_ready_s": round(start_s, 2),
        "testbed_timings_s": {k: round(v, 2) for k, v in tb.timings.items()},
        "pods": pods,
        "pod_create_to_running_s": {
            "median": round(statistics.median(starts), 2),
            "max": round(max(starts), 2),
            "all": [round(s, 2) for s in starts],
        },
        "kubeacc_image_make_or_reuse_s": round(image_s, 2),
        "kubeacc_image_mib": round(image.tarball.stat().st_size / 2**20, 1),
        "kubeacc_image_import_s": round(import_s, 2),
        "containerd_rss_mib": memory,
        "testbed_stop_s": round(stop_s, 2),
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
