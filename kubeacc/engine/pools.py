"""ResourceSlices gathered into pools, and the devices they offer to each node.

Rules (resource.k8s.io/v1):

* a pool is identified by driver + ``spec.pool.name``; only slices with the pool's highest
  ``spec.pool.generation`` count;
* a pool whose newest generation has fewer slices than ``spec.pool.resourceSliceCount`` is
  *incomplete*: it is skipped for ``ExactCount`` requests and makes ``All`` requests fail;
* a slice is reachable from a node through ``nodeName`` (that node), ``nodeSelector`` (nodes
  whose labels/fields match) or ``allNodes``; with ``perDeviceNodeSelection`` each device says
  so itself;
* attributes without a domain belong to the driver's domain; capacities are quantities;
  ``sharedCounters`` are per pool, ``consumesCounters`` per device.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property, lru_cache, partial
from typing import Any

from kubeacc.engine import celgo
from kubeacc.engine.celenv import DeviceEnv, qvalue, svalue
from kubeacc.engine.celquantity import INT, go_rep
from kubeacc.engine.quantity import QuantityError, parse_quantity
from kubeacc.engine.semver import SemverError, parse_semver

AttrValue = int | bool | str

#: a version attribute outside CEL: a one-key map holding the canonical version
SEMVER_KEY = "__kubeacc.io/semver__"

DeviceKey = tuple[str, str, str]  # driver, pool, device


@dataclass
class Node:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    #: ``status.allocatable``: what the kubelet advertises (device plugins' extended resources)
    allocatable: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Node:
        meta = obj.get("metadata") or {}
        alloc = (obj.get("status") or {}).get("allocatable") or {}
        return cls(
            str(meta.get("name", "")),
            dict(meta.get("labels") or {}),
            {str(k): str(v) for k, v in alloc.items()},
        )


def _get(obj: Mapping[str, Any], *keys: str) -> Any:
    """``obj[k]`` for the first spelling present (camelCase API JSON or snake_case to_dict())."""
    for k in keys:
        if k in obj and obj[k] is not None:
            return obj[k]
    return None


@lru_cache(maxsize=1024)
def _camel_to_snake(name: str) -> str:
    out = []
    for ch in name:
        if ch.isupper():
            out.append("_" + ch.lower())
        else:
            out.append(ch)
    return "".join(out)


def get(obj: Mapping[str, Any] | None, key: str, default: Any = None) -> Any:
    """Field ``key`` (camelCase) of an API dict, accepting the snake_case spelling too."""
    if not obj:
        return default
    v = _get(obj, key, _camel_to_snake(key))
    return default if v is None else v


def node_selector_matches(selector: Mapping[str, Any] | None, node: Node) -> bool:
    """A core/v1 NodeSelector: terms ORed, expressions within a term ANDed."""
    if not selector:
        return False
    terms = get(selector, "nodeSelectorTerms", [])
    for term in terms:
        exprs = get(term, "matchExpressions", [])
        fields_ = get(term, "matchFields", [])
        if not exprs and not fields_:
            continue  # an empty term matches nothing
        if all(_requirement(e, node.labels) for e in exprs) and all(
            _requirement(f, {"metadata.name": node.name}) for f in fields_
        ):
            return True
    return False


def _requirement(req: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key = get(req, "key", "")
    op = get(req, "operator", "")
    vals = list(get(req, "values", []))
    have = key in values
    v = values.get(key, "")
    if op == "In":
        return have and v in vals
    if op == "NotIn":
        return not have or v not in vals
    if op == "Exists":
        return have
    if op == "DoesNotExist":
        return not have
    if op in ("Gt", "Lt"):
        try:
            a, b = int(v), int(vals[0])
        except (ValueError, IndexError):
            return False
        return have and (a > b if op == "Gt" else a < b)
    return False


@dataclass
class Device:
    """One device of a complete or incomplete pool, flattened for the allocator."""

    driver: str
    pool: str
    name: str
    slice_name: str
    attributes: dict[str, AttrValue | dict[str, str]]
    capacity: dict[str, Fraction]
    capacity_policy: dict[str, dict[str, Any]]
    consumes: list[tuple[str, dict[str, Fraction]]]
    allow_multiple: bool
    taints: list[dict[str, Any]]
    node_name: str | None
    node_selector: dict[str, Any] | None
    all_nodes: bool
    raw: dict[str, Any]
    #: capacity names as the slice writes them -> the qualified keys of ``capacity``. A claim's
    #: capacity request and a result's ``consumedCapacity`` use the written name, literally:
    #: the allocator looks ``memory`` and ``<driver>/memory`` up as different names.
    capacity_names: dict[str, str] = field(default_factory=dict)
    _env: DeviceEnv | None = None
    _fp: str | None = None
    _written: dict[str, str] | None = None
    _typed: dict[str, tuple[str, Any]] | None = None

    def typed_attribute(self, qualified: str) -> tuple[str, Any] | None:
        """(kind, value as written) of an attribute: constraints compare these, so ``true``
        never equals ``1`` and versions compare as written (build metadata included)."""
        return self.typed_attributes().get(qualified)

    def typed_attributes(self) -> dict[str, tuple[str, Any]]:
        """Every attribute by qualified name: (kind, value as written)."""
        if self._typed is None:
            self._typed = typed_attributes(self.raw, self.driver)
        return self._typed

    @cached_property
    def key(self) -> DeviceKey:
        """(driver, pool, name), made once: searches look devices up by it many times a node."""
        return (self.driver, self.pool, self.name)

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"

    def attribute(self, qualified: str) -> AttrValue | dict[str, str] | None:
        return self.attributes.get(qualified)

    def reachable_from(self, node: Node) -> bool:
        if self.all_nodes:
            return True
        if self.node_name is not None:
            return self.node_name == node.name
        return node_selector_matches(self.node_selector, node)

    def capacity_key(self, name: str) -> str | None:
        """The ``capacity`` key a claim's capacity request ``name`` refers to, or None when the
        device has no capacity written exactly so."""
        return self.capacity_names.get(name)

    @cached_property
    def negative_capacity(self) -> bool:
        """A capacity (or a policy default) below zero: v1.37's allocator fails the pod when
        such a device reaches its capacity check (a value stored before validation)."""
        defaults = [p.get("default") for p in self.capacity_policy.values()]
        return any(v < 0 for v in self.capacity.values()) or any(
            parse_quantity(str(v)) < 0 for v in defaults if v is not None
        )

    def written_capacity(self, qualified: str) -> str:
        """The name the slice wrote for the capacity kept under ``qualified``."""
        if self._written is None:
            self._written = {q: w for w, q in self.capacity_names.items()}
        return self._written.get(qualified, qualified)

    @property
    def fingerprint(self) -> str:
        """Identity of what a selector can see (driver, attributes, capacity, sharing): equal
        fingerprints give equal verdicts, so verdicts and CEL contexts are shared by them."""
        if self._fp is None:
            self._fp = json.dumps(
                [
                    self.driver,
                    self.allow_multiple,
                    self.attributes,
                    {k: str(v) for k, v in self.capacity.items()},
                    self.capacity_names,
                    self.capacity_reps,
                ],
                sort_keys=True,
                default=str,
            )
        return self._fp

    @cached_property
    def capacity_reps(self) -> dict[str, str]:
        """The form Go holds each capacity in, where it is not the usual integer
        (:mod:`kubeacc.engine.celquantity`: ``0.5Ti`` is a decimal, ``1000m`` has scale -3)."""
        out: dict[str, str] = {}
        for written, q in self.capacity_names.items():
            raw = get(get(self.raw, "capacity", {}) or {}, written, {}) or {}
            rep = go_rep(str(get(raw, "value", "0")))
            if rep != INT:
                out[q] = rep
        return out

    @property
    def env(self) -> DeviceEnv:
        if self._env is None:
            shared = _ENVS.get(self.fingerprint)
            if shared is not None:
                self._env = shared
                return shared
            attrs: dict[str, dict[str, Any]] = {}
            for q, v in self.attributes.items():
                domain, _, ident = q.rpartition("/")
                attrs.setdefault(domain, {})[ident] = _cel_attr(v)
            caps: dict[str, dict[str, Any]] = {}
            reps = self.capacity_reps
            for q, c in self.capacity.items():
                domain, _, ident = q.rpartition("/")
                caps.setdefault(domain, {})[ident] = qvalue(c, reps.get(q, INT))
            self._env = DeviceEnv(
                {
                    "driver": self.driver,
                    "attributes": attrs,
                    "capacity": caps,
                    "allowMultipleAllocations": self.allow_multiple,
                },
                partial(go_device, self.driver, self.raw, self.allow_multiple),
            )
            if len(_ENVS) < _ENVS_MAX:
                _ENVS[self.fingerprint] = self._env
        return self._env


#: CEL contexts shared by devices that look alike to a selector (bounded).
_ENVS: dict[str, DeviceEnv] = {}
_ENVS_MAX = 100_000


def typed_attributes(raw: Mapping[str, Any], driver: str) -> dict[str, tuple[str, Any]]:
    """A slice device's attributes by qualified name: (kind, value as written)."""
    out: dict[str, tuple[str, Any]] = {}
    for k, v in (get(raw, "attributes", {}) or {}).items():
        for kind in ("string", "int", "bool", "version"):
            if get(v, kind) is not None:
                out[qualify(k, driver)] = (kind, get(v, kind))
                break
    return out


def go_device(driver: str, raw: Mapping[str, Any], multi: bool) -> str:
    """A slice device as kube-scheduler's CEL library reads it (:mod:`kubeacc.engine.celgo`):
    attributes and capacities as the slice writes them. Made only for a selector that needs
    that library; the device's CEL context keeps ``raw``, not the device."""
    capacity = {
        str(k): str(get(c, "value", "0")) for k, c in (get(raw, "capacity", {}) or {}).items()
    }
    return celgo.device_json(driver, typed_attributes(raw, driver), capacity, multi)


def qualify(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def _cel_attr(v: AttrValue | dict[str, str]) -> Any:
    if isinstance(v, dict):
        return svalue(parse_semver(v[SEMVER_KEY]))
    return v


def _attr_value(raw: Mapping[str, Any]) -> AttrValue | dict[str, str]:
    for kind in ("string", "int", "bool"):
        v = get(raw, kind)
        if v is not None:
            return v  # type: ignore[no-any-return]
    ver = get(raw, "version")
    if ver is not None:
        try:
            return {SEMVER_KEY: str(parse_semver(str(ver)))}
        except SemverError:
            return str(ver)
    raise ValueError(f"attribute without a value: {dict(raw)!r}")


@dataclass
class Pool:
    driver: str
    name: str
    generation: int
    slice_count: int
    slices: list[dict[str, Any]]
    devices: list[Device]
    counters: dict[str, dict[str, Fraction]]
    problems: list[str] = field(default_factory=list)

    @property
    def incomplete(self) -> bool:
        return len(self.slices) < self.slice_count

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"


def _device(driver: str, pool: str, slc: Mapping[str, Any], raw: Mapping[str, Any]) -> Device:
    spec = get(slc, "spec", {})
    meta = get(slc, "metadata", {})
    per_device = bool(get(spec, "perDeviceNodeSelection", False))
    src = raw if per_device else spec
    attrs = {
        qualify(k, driver): _attr_value(v) for k, v in (get(raw, "attributes", {}) or {}).items()
    }
    capacity: dict[str, Fraction] = {}
    capacity_names: dict[str, str] = {}
    policy: dict[str, dict[str, Any]] = {}
    for k, v in (get(raw, "capacity", {}) or {}).items():
        q = qualify(k, driver)
        capacity_names[str(k)] = q
        capacity[q] = parse_quantity(str(get(v, "value", "0")))
        rp = get(v, "requestPolicy")
        if rp:
            policy[q] = dict(rp)
    consumes = []
    for cc in get(raw, "consumesCounters", []) or []:
        consumes.append(
            (
                str(get(cc, "counterSet", "")),
                {
                    n: parse_quantity(str(get(c, "value", "0")))
                    for n, c in (get(cc, "counters", {}) or {}).items()
                },
            )
        )
    return Device(
        driver=driver,
        pool=pool,
        name=str(get(raw, "name", "")),
        slice_name=str(get(meta, "name", "")),
        attributes=attrs,
        capacity=capacity,
        capacity_policy=policy,
        capacity_names=capacity_names,
        consumes=consumes,
        allow_multiple=bool(get(raw, "allowMultipleAllocations", False)),
        taints=list(get(raw, "taints", []) or []),
        node_name=get(src, "nodeName"),
        node_selector=get(src, "nodeSelector"),
        all_nodes=bool(get(src, "allNodes", False)),
        raw=dict(raw),
    )


class DeviceCache:
    """Parsed devices per slice, shared by every node that sees the slice."""

    def __init__(self) -> None:
        self._by_slice: dict[int, list[Device] | str] = {}

    def devices(self, s: Mapping[str, Any]) -> list[Device] | str:
        hit = self._by_slice.get(id(s))
        if hit is None:
            spec = get(s, "spec", {})
            driver = str(get(spec, "driver", ""))
            pool = str(get(get(spec, "pool", {}), "name", ""))
            try:
                hit = [_device(driver, pool, s, raw) for raw in get(spec, "devices", []) or []]
            except (ValueError, QuantityError) as e:
                hit = str(e)
            self._by_slice[id(s)] = hit
        return hit


def gather_pools(
    slices: Iterable[Mapping[str, Any]], cache: DeviceCache | None = None
) -> list[Pool]:
    """Group slices into pools, keeping only each pool's newest generation."""
    newest: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    gen: dict[tuple[str, str], int] = {}
    for slc in slices:
        spec = get(slc, "spec", {})
        driver = str(get(spec, "driver", ""))
        pool = get(spec, "pool", {})
        key = (driver, str(get(pool, "name", "")))
        g = int(get(pool, "generation", 0))
        if key not in gen or g > gen[key]:
            gen[key] = g
            newest[key] = []
        if g == gen[key]:
            newest[key].append(slc)
    pools = []
    for (driver, name), group in sorted(newest.items()):
        count = max(
            int(get(get(get(s, "spec", {}), "pool", {}), "resourceSliceCount", 1)) for s in group
        )
        pool = Pool(driver, name, gen[(driver, name)], count, [dict(s) for s in group], [], {})
        seen: set[str] = set()
        for slc in group:
            spec = get(slc, "spec", {})
            for cs in get(spec, "sharedCounters", []) or []:
                try:
                    pool.counters[str(get(cs, "name", ""))] = {
                        n: parse_quantity(str(get(c, "value", "0")))
                        for n, c in (get(cs, "counters", {}) or {}).items()
                    }
                except QuantityError as e:
                    pool.problems.append(f"counter set {get(cs, 'name')}: {e}")
            devs = (cache or DeviceCache()).devices(slc)
            if isinstance(devs, str):
                pool.problems.append(f"slice {get(get(slc, 'metadata', {}), 'name')}: {devs}")
                continue
            for dev in devs:
                if dev.name in seen:
                    pool.problems.append(f"duplicate device name {dev.name}")
                    continue
                seen.add(dev.name)
                pool.devices.append(dev)
        pools.append(pool)
    return pools


def node_names(slices: Sequence[Mapping[str, Any]]) -> list[str]:
    """Nodes named by node-local slices or devices (when no Node objects are given)."""
    out: dict[str, None] = {}
    for slc in slices:
        spec = get(slc, "spec", {})
        if get(spec, "nodeName"):
            out[str(get(spec, "nodeName"))] = None
        for d in get(spec, "devices", []) or []:
            if get(d, "nodeName"):
                out[str(get(d, "nodeName"))] = None
    return list(out)
