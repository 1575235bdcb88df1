"""The extender's Kubernetes side: watches that feed :class:`State`, the binder, the Lease.

* Accelerators (``kubeacc.io/v1alpha1``, written by the node agents): the GPUs of each node.
* Pods (all namespaces): who holds what, from the decision recorded on bound pods.

Both are list-then-watch caches (:class:`kubeacc.crds.watch.WatchCache`); each event updates
only the node it concerns; a (re)list replaces the whole view. The caches hold only the fields
the extender reads (:mod:`kubeacc.extender.kept`) and list in pages of :data:`PAGE`, so neither
they nor a LIST hold whole objects of every Accelerator and Pod of the cluster.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import msgspec
from lightkube import ApiError, Client
from lightkube.models.core_v1 import ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod, PodBinding

from kubeacc.contracts.names import DECISION_ANNOTATION
from kubeacc.contracts.trusted import decision_condition
from kubeacc.contracts.wants import Decision
from kubeacc.crds.resources import Accelerator, as_dict
from kubeacc.crds.watch import WatchCache
from kubeacc.extender import kept
from kubeacc.extender.state import Gpu, State, gpu_of
from kubeacc.leader import LeaderElector
from kubeacc.model import Device, ModelError

log = logging.getLogger(__name__)
FIELD_MANAGER = "kubeacc-extender"
LEASE_NAME = "kubeacc-extender"
#: Objects per LIST request (the API server's continue tokens); as the controller's.
PAGE = 500
Keep = Callable[[dict[str, Any]], dict[str, Any]]


def accelerator_gpu(obj: dict[str, Any]) -> tuple[str, str, Gpu | None]:
    """(node, device name, the GPU or None) of one Accelerator."""
    spec = obj.get("spec") or {}
    node = str(spec.get("node") or "")
    name = str(spec.get("deviceName") or "")
    raw = (obj.get("status") or {}).get("device")
    if not raw:
        return node, name, None
    try:
        device = Device.from_json_dict(raw)
    except ModelError as err:
        log.warning("accelerator %s: unreadable status.device: %s", name, err)
        return node, name, None
    return node, name, gpu_of(device, bool(spec.get("cordoned")))


class Inventory:
    """Keeps ``state`` current from the API server."""

    def __init__(
        self,
        client: Client,
        state: State,
        *,
        keep_accelerator: Keep = kept.accelerator,
        keep_pod: Keep = kept.pod,
        page: int | None = PAGE,
    ) -> None:
        """``keep_accelerator``/``keep_pod``: what the caches hold of each object
        (:mod:`.kept`; :func:`.kept.whole` for everything, as tests and benchmarks compare)."""
        self.state = state
        self._gpus: dict[str, dict[str, Gpu]] = {}
        self._lock = threading.Lock()
        #: Set once ``state`` holds a LIST of the kind. A cache is synced as soon as its LIST
        #: arrived, before its callback has built the state from it (seconds at 5,000 nodes):
        #: verbs answered in between would decide on an empty view.
        self.accelerators_built = threading.Event()
        self.pods_built = threading.Event()
        self.accelerators = WatchCache(
            client,
            Accelerator,
            on_change=self._relist_accelerators,
            wake_if=self._accelerator_event,
            name="extender-accelerators",
            keep=keep_accelerator,
            page=page,
        )
        self.pods = WatchCache(
            client,
            Pod,
            namespaced=True,
            on_change=self._relist_pods,
            wake_if=self._pod_event,
            name="extender-pods",
            keep=keep_pod,
            page=page,
        )

    def start(self) -> None:
        self.accelerators.start()
        self.pods.start()

    def close(self) -> None:
        self.accelerators.close()
        self.pods.close()

    def synced(self) -> bool:
        return not self.not_ready()

    def not_ready(self) -> list[str]:
        """Why ``state`` is not (yet) the cluster's: a kind not listed, or listed and not
        yet built into the state."""
        problems = []
        for kind, cache, built in (
            ("accelerators", self.accelerators, self.accelerators_built),
            ("pods", self.pods, self.pods_built),
        ):
            if not cache.synced.is_set():
                problems.append(f"{kind} not synced")
            elif not built.is_set():
                problems.append(f"{kind} listed, state not built yet")
        return problems

    # after a LIST: everything anew
    def _relist_accelerators(self) -> None:
        per_node: dict[str, dict[str, Gpu]] = {}
        for obj in self.accelerators.items():
            node, name, gpu = accelerator_gpu(obj)
            if gpu is not None and node:
                per_node.setdefault(node, {})[name] = gpu
        with self._lock:
            self._gpus = per_node
            self.state.set_inventory({n: list(g.values()) for n, g in per_node.items()})
        self.accelerators_built.set()

    def _accelerator_event(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
        with self._lock:
            touched: set[str] = set()
            if old is not None:
                node, name, _ = accelerator_gpu(old)
                moved = new is None or accelerator_gpu(new)[:2] != (node, name)
                if node and moved:
                    self._gpus.get(node, {}).pop(name, None)
                    touched.add(node)
            if new is not None:
                node, name, gpu = accelerator_gpu(new)
                if node:
                    gpus = self._gpus.setdefault(node, {})
                    if gpu is not None:
                        gpus[name] = gpu
                    else:
                        gpus.pop(name, None)
                    touched.add(node)
            for node in touched:  # one update per node: no half-changed node is ever seen
                gpus = self._gpus.get(node) or {}
                if gpus:
                    self.state.set_node(node, list(gpus.values()))
                else:
                    self._gpus.pop(node, None)
                    self.state.remove_node(node)
        return False  # handled here; on_change is kept for the LISTs

    def _relist_pods(self) -> None:
        self.state.set_pods(self.pods.items())
        self.pods_built.set()

    def _pod_event(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
        self.state.pod_event(old, new)
        return False


class KubeBinder:
    """Writes the decision on the pod, then binds it (the scheduler's default binder's call)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return as_dict(self.client.get(Pod, name, namespace=namespace))

    def record(self, namespace: str, name: str, uid: str, decision: Decision) -> None:
        """The decision as the pod's condition (the record that counts: a namespace user
        cannot write ``pods/status``), then as its annotation (docs/security.md)."""
        # The uid makes the patches fail on a pod recreated under the same name; a strategic
        # merge patch replaces only the condition of its type.
        status = {
            "metadata": {"uid": uid},
            "status": {"conditions": [decision_condition(decision)]},
        }
        self.client.patch(
            Pod.Status, name, status, namespace=namespace, field_manager=FIELD_MANAGER
        )
        patch = {"metadata": {"uid": uid, "annotations": {DECISION_ANNOTATION: decision.to_json()}}}
        self.client.patch(Pod, name, patch, namespace=namespace, field_manager=FIELD_MANAGER)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        binding = PodBinding(
            metadata=ObjectMeta(name=name, namespace=namespace, uid=uid),
            target=ObjectReference(apiVersion="v1", kind="Node", name=node),
        )
        # The API server answers a created binding with a Status, which lightkube then fails
        # to decode as a Binding; it raises for HTTP errors before decoding, so reaching the
        # decoder means the pod is bound.
        with contextlib.suppress(msgspec.ValidationError):
            self.client.create(binding, name, namespace=namespace)


class Leadership:
    """Renews the extender's Lease in a thread; :attr:`leading` says whether to serve."""

    def __init__(
        self, client: Client, identity: str, namespace: str, lease_duration: int = 15
    ) -> None:
        self.elector = LeaderElector(
            client,
            name=LEASE_NAME,
            namespace=namespace,
            identity=identity,
            lease_duration=lease_duration,
        )
        self.leading = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="extender-lease", daemon=True)
        self.period = max(1.0, lease_duration / 3)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                leads = self.elector.try_acquire_or_renew()
            except (ApiError, OSError, Exception) as err:  # API server away: not leading
                log.warning("leader election: %s", err)
                leads = False
            if leads and not self.leading.is_set():
                log.info("leading: serving filter/prioritize/bind")
            if not leads and self.leading.is_set():
                log.warning("lost the lease: not serving until it is back")
            (self.leading.set if leads else self.leading.clear)()
            if self._stop.wait(self.period):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.elector.release()
