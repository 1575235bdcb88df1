"""A pod's extended-resource requests served through DRA, as kube-scheduler v1.37 plans them.

A DeviceClass may name an extended resource (``spec.extendedResourceName``, e.g.
``kubeacc.io/gpu``); every class also answers to ``deviceclass.resource.kubernetes.io/<class>``.
A pod asking such a resource in its containers gets, on each node the scheduler tries, a
*special claim*: one ``ExactCount`` request per (container, resource) with ``count`` the quantity,
allocated together with the pod's own claims. A node whose kubelet advertises the resource
(``status.allocatable`` above zero: a device plugin serves it there) is left to the plugin instead,
so the same request is never counted twice; a resource no class names must be advertised by the
node. When two classes name one resource, the newest class wins (on a tie, the smaller name).

The request names (``container-<i>-request-<j>``: ``i`` counts init containers first, ``j`` is
the resource's place among the container's sorted request names) and the mapping of containers
to requests are the scheduler's, so a plan's allocation reads like the claim it would create.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeacc.engine.pools import Node, get
from kubeacc.engine.quantity import QuantityError, parse_quantity

#: the implicit extended resource name of every DeviceClass
CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"


class ExtendedResourceError(ValueError):
    """The pod's extended-resource requests cannot be read (not whole numbers, not numbers)."""


def is_extended_name(name: str) -> bool:
    """Whether kube-scheduler may back ``name`` by DRA: an extended resource name (qualified,
    outside the ``kubernetes.io`` domains, not ``requests.*``) or a class's implicit name."""
    if name.startswith(CLASS_PREFIX):
        return True
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def class_by_resource(classes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Extended resource name -> the DeviceClass serving it."""
    out: dict[str, str] = {}
    owner: dict[str, tuple[str, str]] = {}  # resource -> (creationTimestamp, class name)
    for c in classes:
        meta = get(c, "metadata", {})
        name = str(get(meta, "name", ""))
        if not name:
            continue
        out[CLASS_PREFIX + name] = name
        explicit = get(get(c, "spec", {}), "extendedResourceName")
        if not explicit:
            continue
        created = str(get(meta, "creationTimestamp", "") or "")
        held = owner.get(str(explicit))
        # RFC 3339 timestamps of one format compare as strings; newest wins, then smaller name
        if held is None or created > held[0] or (created == held[0] and name < held[1]):
            owner[str(explicit)] = (created, name)
            out[str(explicit)] = name
    return out


def _count(resource: str, raw: Any, where: str) -> int:
    try:
        q = parse_quantity(str(raw))
    except QuantityError as e:
        raise ExtendedResourceError(f"{where}: {resource}: {e}") from None
    if q.denominator != 1 or q < 0:
        raise ExtendedResourceError(
            f"{where}: {resource}: {raw} is not a whole number (extended resources are counted)"
        )
    return int(q)


def container_requests(container: Mapping[str, Any], where: str = "container") -> dict[str, int]:
    """A container's extended-resource requests; a limit without a request is the request
    (the API server's defaulting for extended resources)."""
    res = get(container, "resources", {}) or {}
    merged = dict(get(res, "limits", {}) or {})
    merged.update(get(res, "requests", {}) or {})
    return {str(k): _count(str(k), v, where) for k, v in merged.items() if is_extended_name(str(k))}


def _request_names(container: Mapping[str, Any]) -> list[str]:
    """Every resource name the container asks (after defaulting), sorted: a request's name
    counts its resource's place among them."""
    res = get(container, "resources", {}) or {}
    return sorted(
        {str(k) for k in (get(res, "limits", {}) or {})}
        | {str(k) for k in (get(res, "requests", {}) or {})}
    )


def _containers(pod: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], int]:
    spec = get(pod, "spec", {}) or {}
    inits = [c for c in get(spec, "initContainers", []) or [] if isinstance(c, Mapping)]
    mains = [c for c in get(spec, "containers", []) or [] if isinstance(c, Mapping)]
    return inits + mains, len(inits)


def _sidecar(c: Mapping[str, Any]) -> bool:
    return bool(get(c, "restartPolicy") == "Always")


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """The pod's extended-resource requests as the scheduler sums them: the app containers and
    sidecars together, or more where an init container (with the sidecars started before it)
    asks more."""
    containers, n_init = _containers(pod)
    reqs = [
        container_requests(c, f"container {get(c, 'name', i)}") for i, c in enumerate(containers)
    ]
    total: dict[str, int] = {}
    for i in range(len(containers)):
        if i >= n_init or _sidecar(containers[i]):
            for k, v in reqs[i].items():
                total[k] = total.get(k, 0) + v
    sidecars: dict[str, int] = {}
    for i in range(n_init):
        if _sidecar(containers[i]):
            for k, v in reqs[i].items():
                sidecars[k] = sidecars.get(k, 0) + v
            continue
        for k, v in reqs[i].items():
            total[k] = max(total.get(k, 0), v + sidecars.get(k, 0))
    return {k: v for k, v in total.items() if v}


@dataclass(frozen=True)
class NodeExtended:
    """What the pod's extended resources need on one node."""

    #: the special claim for the resources DRA serves here (None: none is needed)
    claim: dict[str, Any] | None = None
    #: resource -> count the node's device plugin serves
    plugin: dict[str, int] = field(default_factory=dict)
    #: container/resource/request mapping of the special claim (pod.status' requestMappings)
    mappings: list[dict[str, str]] = field(default_factory=list)
    #: why the node cannot take the pod
    reason: str | None = None


@dataclass
class PodExtended:
    """A pod's extended resources and the classes that could serve them."""

    pod: Mapping[str, Any]
    requests: dict[str, int]
    by_resource: dict[str, str]
    #: node -> resource -> count already taken through the device plugin (shared by the pods
    #: of one plan: :meth:`take` adds a placed pod's)
    plugin_used: dict[str, dict[str, int]] = field(default_factory=dict)
    #: the answer for a node that advertises none of the resources (the same on all of them)
    _all_dra: NodeExtended | None = None

    @classmethod
    def of(
        cls,
        pod: Mapping[str, Any],
        classes: Iterable[Mapping[str, Any]],
        plugin_used: dict[str, dict[str, int]] | None = None,
    ) -> PodExtended | None:
        """None when no class backs any of the pod's extended resources (the scheduler then
        leaves them to the node's allocatable alone)."""
        by_resource = class_by_resource(classes)
        reqs = pod_requests(pod)
        if not any(r in by_resource for r in reqs):
            return None
        return cls(pod, reqs, by_resource, {} if plugin_used is None else plugin_used)

    @property
    def pod_ref(self) -> str:
        meta = get(self.pod, "metadata", {})
        return f"{get(meta, 'namespace', '') or 'default'}/{get(meta, 'name', '')}"

    @property
    def claim_ref(self) -> str:
        """The claim's name before the API server adds its suffix (``generateName``)."""
        return f"{self.pod_ref}-extended-resources"

    def take(self, node: str, plugin: Mapping[str, int]) -> None:
        """Count what the node's device plugin gives this pod as used."""
        mine = self.plugin_used.setdefault(node, {})
        for k, v in plugin.items():
            mine[k] = mine.get(k, 0) + v

    def for_node(self, node: Node) -> NodeExtended:
        if self._all_dra is not None and not any(r in node.allocatable for r in self.requests):
            return self._all_dra
        got = self._for_node(node)
        if got.reason is None and not got.plugin:
            self._all_dra = got
        return got

    def _for_node(self, node: Node) -> NodeExtended:
        dra: dict[str, int] = {}
        plugin: dict[str, int] = {}
        for name in sorted(self.requests):
            want = self.requests[name]
            raw = node.allocatable.get(name)
            have = 0 if raw is None else _count(name, raw, f"node {node.name} allocatable")
            if name in self.by_resource and have == 0:
                dra[name] = want
                continue
            if raw is None:
                return NodeExtended(reason=f"node does not offer {name} (no DeviceClass names it)")
            free = have - self.plugin_used.get(node.name, {}).get(name, 0)
            if free < want:
                return NodeExtended(
                    reason=f"{name}: the node's device plugin has {max(free, 0)} of {have} free, "
                    f"the pod asks {want}"
                )
            plugin[name] = want
        if not dra:
            return NodeExtended(plugin=plugin)
        requests, mappings = self._requests(dra)
        meta = get(self.pod, "metadata", {})
        claim = {
            "metadata": {
                "namespace": get(meta, "namespace", "") or "default",
                "name": f"{get(meta, 'name', '')}-extended-resources",
                "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
            },
            "spec": {"devices": {"requests": requests}},
        }
        return NodeExtended(claim=claim, plugin=plugin, mappings=mappings)

    def _requests(
        self, dra: Mapping[str, int]
    ) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        """One request per (container, resource); an init container's need is met by the
        requests of the containers after it when they ask as much, else it adds the rest, and
        only the largest such init request is kept (they run one at a time)."""
        containers, n_init = _containers(self.pod)
        per = [container_requests(c) for c in containers]
        names = [str(get(c, "name", "")) for c in containers]
        keys = [_request_names(c) for c in containers]
        out: list[dict[str, Any]] = []
        mappings: list[dict[str, str]] = []
        for resource in sorted(dra):
            cls = self.by_resource[resource]
            long_lived: dict[int, dict[str, Any]] = {}
            long_maps: list[dict[str, str]] = []
            for i, c in enumerate(per):
                if i < n_init and not _sidecar(containers[i]):
                    continue
                req, maps = _container_request(i, names[i], c, keys[i], resource, cls, [])
                if req is not None:
                    long_lived[i] = req
                long_maps += maps
            biggest: dict[str, Any] | None = None
            short_names: set[str] = set()
            short_maps: list[dict[str, str]] = []
            for i in range(n_init):
                if _sidecar(containers[i]):
                    continue
                after = [long_lived[j] for j in sorted(long_lived) if j >= i]
                req, maps = _container_request(i, names[i], per[i], keys[i], resource, cls, after)
                if req is not None:
                    short_names.add(req["name"])
                    if biggest is None or biggest["exactly"]["count"] < req["exactly"]["count"]:
                        biggest = req
                short_maps += maps
            if biggest is not None and len(short_names) > 1:
                short_names.discard(biggest["name"])
                for m in short_maps:
                    if m["requestName"] in short_names:
                        m["requestName"] = biggest["name"]
            if biggest is not None:
                out.append(biggest)
            out += [long_lived[j] for j in sorted(long_lived)]
            mappings += long_maps + short_maps
        out.sort(key=lambda r: str(r["name"]))
        return out, mappings


def _container_request(
    index: int,
    name: str,
    reqs: Mapping[str, int],
    keys: list[str],
    resource: str,
    cls: str,
    reusable: list[dict[str, Any]],
) -> tuple[dict[str, Any] | None, list[dict[str, str]]]:
    want = reqs.get(resource, 0)
    if not want:
        return None, []
    maps: list[dict[str, str]] = []
    covered = 0
    for r in reusable:
        covered += int(r["exactly"]["count"])
        maps.append({"containerName": name, "resourceName": resource, "requestName": r["name"]})
        if covered >= want:
            return None, maps
    req_name = f"container-{index}-request-{keys.index(resource)}"
    maps.append({"containerName": name, "resourceName": resource, "requestName": req_name})
    request = {
        "name": req_name,
        "exactly": {
            "deviceClassName": cls,
            "allocationMode": "ExactCount",
            "count": want - covered,
        },
    }
    return request, maps


def plugin_use(pods: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """node -> resource -> count the bound, unfinished pods ask there (what a device plugin has
    already given out, as the scheduler's NodeResourcesFit counts it)."""
    out: dict[str, dict[str, int]] = {}
    for pod in pods:
        node = get(get(pod, "spec", {}), "nodeName")
        phase = get(get(pod, "status", {}), "phase")
        if not node or phase in ("Succeeded", "Failed"):
            continue
        try:
            reqs = pod_requests(pod)
        except ExtendedResourceError:
            continue
        mine = out.setdefault(str(node), {})
        for k, v in reqs.items():
            mine[k] = mine.get(k, 0) + v
    return out


def asks_extended(pod: Mapping[str, Any]) -> bool:
    """Whether any container of the pod names an extended resource (counted or not)."""
    containers, _ = _containers(pod)
    for c in containers:
        res = get(c, "resources", {}) or {}
        names = list(get(res, "limits", {}) or {}) + list(get(res, "requests", {}) or {})
        if any(is_extended_name(str(n)) for n in names):
            return True
    return False


def pending_extended(
    pod: Mapping[str, Any],
    classes: Iterable[Mapping[str, Any]],
    plugin_used: dict[str, dict[str, int]] | None = None,
) -> PodExtended | None:
    """The extended resources the scheduler still has to place for this pod: None when it is
    bound or finished, its special claim exists already (``status.extendedResourceClaimStatus``)
    or no class serves any of its resources. :class:`ExtendedResourceError` for bad counts."""
    if get(get(pod, "spec", {}), "nodeName"):
        return None
    status = get(pod, "status", {}) or {}
    if get(status, "phase") in ("Succeeded", "Failed") or get(
        status, "extendedResourceClaimStatus"
    ):
        return None
    return PodExtended.of(pod, classes, plugin_used)
