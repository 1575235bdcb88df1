"""Topology Manager semantics: merging hints across providers, policies, scopes, admission.

Follows the kubelet's Topology Manager:

* **merge** — every provider contributes one hint list per resource (``None`` = no preference
  becomes ``[any, preferred]``; ``[]`` = impossible becomes ``[any, not preferred]``; a provider
  with no hints at all contributes ``[any, preferred]``). Every combination (one hint per list)
  is ANDed; the merged hint is preferred only if every hint in it is preferred *and* all its
  non-``any`` masks are equal. Empty merged masks are skipped.
* **best hint** — preferred beats non-preferred; between preferred hints the narrower wins (or,
  with ``prefer-closest-numa-nodes``, among equal widths the lower average SLIT distance); between
  non-preferred hints the one whose width is closest to, without exceeding, the largest of the
  providers' narrowest widths wins. No candidate: ``{all nodes}``, not preferred.
* **policies** — ``none`` (no hint, always admit), ``best-effort`` (always admit),
  ``restricted`` (admit only a preferred best hint), ``single-numa-node`` (first keep only
  preferred single-node or ``any`` hints, merge by narrowness, turn an all-nodes result into
  ``any``, admit only if preferred).
* **scopes** — ``container``: merge and admit each container on its own; ``pod``: providers
  answer for the whole pod (requests summed, see :func:`~kubeacc.topology.hints.pod_requests`),
  one merge, one decision for all containers.
* more than :data:`~kubeacc.topology.hints.MAX_ALLOWABLE_NUMA_NODES` NUMA nodes is refused
  unless ``max_allowable_numa_nodes`` is raised (never lowered below 8).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import product
from typing import Protocol

from kubeacc.topology.hints import (
    MAX_ALLOWABLE_NUMA_NODES,
    ContainerRequest,
    Mask,
    ProviderHints,
    TopologyHint,
    bits,
    is_less,
    is_narrower,
    mask_of,
    width,
)


class Policy(StrEnum):
    NONE = "none"
    BEST_EFFORT = "best-effort"
    RESTRICTED = "restricted"
    SINGLE_NUMA_NODE = "single-numa-node"


class Scope(StrEnum):
    CONTAINER = "container"
    POD = "pod"


class TopologyConfigError(ValueError):
    """The manager cannot run with this machine/configuration (the kubelet would not start)."""


@dataclass(frozen=True)
class NUMAInfo:
    nodes: tuple[int, ...]
    distances: Mapping[int, Sequence[int]] = field(default_factory=dict)

    @property
    def default_affinity(self) -> Mask:
        return mask_of(*self.nodes)

    def average_distance(self, mask: Mask) -> float:
        b = bits(mask)
        if not b:
            return 0.0
        total = 0
        for x in b:
            row = self.distances.get(x, ())
            for y in b:
                total += row[y] if y < len(row) else 0
        return total / (len(b) * len(b))

    def narrowest(self, a: Mask, b: Mask) -> Mask:
        return a if is_narrower(a, b) else b

    def closest(self, a: Mask, b: Mask) -> Mask:
        if width(a) != width(b):
            return self.narrowest(a, b)
        da, db = self.average_distance(a), self.average_distance(b)
        if da == db:
            return a if is_less(a, b) else b
        return a if da < db else b


@dataclass(frozen=True)
class PolicyOptions:
    prefer_closest_numa_nodes: bool = False
    max_allowable_numa_nodes: int = MAX_ALLOWABLE_NUMA_NODES

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> PolicyOptions:
        """From the kubelet's ``topologyManagerPolicyOptions`` strings."""
        closest = False
        max_nodes = MAX_ALLOWABLE_NUMA_NODES
        for key, value in options.items():
            if key == "prefer-closest-numa-nodes":
                closest = _parse_bool(key, value)
            elif key == "max-allowable-numa-nodes":
                try:
                    max_nodes = int(value)
                except ValueError as e:
                    raise TopologyConfigError(f"bad value for option {key!r}: {value!r}") from e
                if max_nodes < MAX_ALLOWABLE_NUMA_NODES:
                    raise TopologyConfigError(
                        f"the minimum value of {key!r} is {MAX_ALLOWABLE_NUMA_NODES}"
                    )
            else:
                raise TopologyConfigError(f"unknown Topology Manager Policy option: {key!r}")
        return cls(closest, max_nodes)


def _parse_bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "t", "true"):
        return True
    if v in ("0", "f", "false"):
        return False
    raise TopologyConfigError(f"bad value for option {key!r}: {value!r}")


def filter_provider_hints(providers: Sequence[ProviderHints]) -> list[list[TopologyHint]]:
    """One hint list per (provider, resource), with the kubelet's defaults for missing ones."""
    out: list[list[TopologyHint]] = []
    for hints in providers:
        if not hints:
            out.append([TopologyHint(None, True)])
            continue
        for resource in sorted(hints):
            lst = hints[resource]
            if lst is None:
                out.append([TopologyHint(None, True)])
            elif len(lst) == 0:
                out.append([TopologyHint(None, False)])
            else:
                out.append(list(lst))
    return out


def merge_permutation(default: Mask, permutation: Sequence[TopologyHint]) -> TopologyHint:
    preferred = True
    merged = default
    first: Mask | None = None
    for hint in permutation:
        if hint.affinity is not None:
            merged &= hint.affinity
            if first is None:
                first = hint.affinity
            elif hint.affinity != first:
                preferred = False
        if not hint.preferred:
            preferred = False
    return TopologyHint(merged, preferred)


def _max_of_min_widths(lists: Sequence[Sequence[TopologyHint]]) -> int:
    best = 0
    for lst in lists:
        narrow: Mask | None = None
        for h in lst:
            if h.affinity is None:
                continue
            if narrow is None or is_narrower(h.affinity, narrow):
                narrow = h.affinity
        if narrow is not None:
            best = max(best, width(narrow))
    return best


@dataclass
class HintMerger:
    numa: NUMAInfo
    hints: list[list[TopologyHint]]
    prefer_closest: bool = False
    best_non_preferred_width: int = 0

    def __post_init__(self) -> None:
        self.best_non_preferred_width = _max_of_min_widths(self.hints)

    def _fitter(self, current: TopologyHint, candidate: TopologyHint) -> TopologyHint:
        assert current.affinity is not None and candidate.affinity is not None
        if current.affinity == candidate.affinity:
            return current
        if self.prefer_closest:
            best = self.numa.closest(current.affinity, candidate.affinity)
        else:
            best = self.numa.narrowest(current.affinity, candidate.affinity)
        return current if best == current.affinity else candidate

    def compare(self, current: TopologyHint | None, candidate: TopologyHint) -> TopologyHint | None:
        cw = width(candidate.affinity or 0)
        if cw == 0:
            return current
        if current is None:
            return candidate
        if candidate.preferred != current.preferred:
            return candidate if candidate.preferred else current
        if current.preferred:
            return self._fitter(current, candidate)
        # Both non-preferred: get as close as possible to (not above) the target width.
        target = self.best_non_preferred_width
        w = width(current.affinity or 0)
        if w > target:
            return self._fitter(current, candidate)
        if w == target:
            return self._fitter(current, candidate) if cw == target else current
        if cw > target:
            return current
        if cw == target:
            return candidate
        if cw > w:
            return candidate
        if cw < w:
            return current
        return self._fitter(current, candidate)

    def merge(self) -> TopologyHint:
        default = self.numa.default_affinity
        best: TopologyHint | None = None
        for permutation in _permutations(self.hints):
            best = self.compare(best, merge_permutation(default, permutation))
        return best if best is not None else TopologyHint(default, False)


def _permutations(lists: Sequence[Sequence[TopologyHint]]) -> Iterator[tuple[TopologyHint, ...]]:
    return product(*lists)


def _single_numa_filter(lists: Sequence[Sequence[TopologyHint]]) -> list[list[TopologyHint]]:
    return [
        [h for h in lst if h.preferred and (h.affinity is None or width(h.affinity) == 1)]
        for lst in lists
    ]


def merge(
    providers: Sequence[ProviderHints],
    policy: Policy,
    numa: NUMAInfo,
    options: PolicyOptions | None = None,
) -> tuple[TopologyHint, bool]:
    """The best hint for these providers' hints under ``policy`` and whether to admit."""
    opts = options or PolicyOptions()
    if policy is Policy.NONE:
        return TopologyHint(None, False), True
    lists = filter_provider_hints(providers)
    if policy is Policy.SINGLE_NUMA_NODE:
        lists = _single_numa_filter(lists)
        best = HintMerger(numa, lists, prefer_closest=False).merge()
        if best.affinity == numa.default_affinity:
            best = TopologyHint(None, best.preferred)
        return best, best.preferred
    best = HintMerger(numa, lists, prefer_closest=opts.prefer_closest_numa_nodes).merge()
    if policy is Policy.BEST_EFFORT:
        return best, True
    return best, best.preferred


class HintProvider(Protocol):
    """What a resource manager (CPU, memory, devices, ...) offers the Topology Manager."""

    def container_hints(self, container: ContainerRequest) -> ProviderHints: ...

    def pod_hints(self, containers: Sequence[ContainerRequest]) -> ProviderHints: ...


@dataclass(frozen=True)
class AdmitResult:
    admit: bool
    hints: dict[str, TopologyHint]
    reason: str = ""


@dataclass
class TopologyManager:
    numa: NUMAInfo
    policy: Policy = Policy.NONE
    scope: Scope = Scope.CONTAINER
    options: PolicyOptions = field(default_factory=PolicyOptions)
    providers: list[HintProvider] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.policy is not Policy.NONE and len(self.numa.nodes) > (
            self.options.max_allowable_numa_nodes
        ):
            raise TopologyConfigError(
                f"unsupported on machines with more than "
                f"{self.options.max_allowable_numa_nodes} NUMA Nodes"
            )

    def admit(self, containers: Sequence[ContainerRequest]) -> AdmitResult:
        """Admit a pod: its containers (init containers first, as listed) under the scope."""
        if self.policy is Policy.NONE:
            return AdmitResult(True, {c.name: TopologyHint(None, False) for c in containers})
        if self.scope is Scope.POD:
            hint, ok = merge(
                [p.pod_hints(containers) for p in self.providers],
                self.policy,
                self.numa,
                self.options,
            )
            return AdmitResult(ok, {c.name: hint for c in containers}, "" if ok else _REJECT_REASON)
        out: dict[str, TopologyHint] = {}
        for c in containers:
            hint, ok = merge(
                [p.container_hints(c) for p in self.providers],
                self.policy,
                self.numa,
                self.options,
            )
            out[c.name] = hint
            if not ok:
                return AdmitResult(False, out, _REJECT_REASON)
        return AdmitResult(True, out)


_REJECT_REASON = "Topology Affinity Error: Resources cannot be allocated with Topology Locality"


#: A callable provider: given the resource requests, the hints (used by the simple providers).
HintFunction = Callable[[Mapping[str, int]], ProviderHints]


@dataclass
class FunctionProvider:
    """A provider from a function of the request; pod scope uses the summed pod request."""

    fn: HintFunction

    def container_hints(self, container: ContainerRequest) -> ProviderHints:
        return self.fn(container.requests)

    def pod_hints(self, containers: Sequence[ContainerRequest]) -> ProviderHints:
        from kubeacc.topology.hints import pod_requests

        return self.fn(pod_requests(containers))
