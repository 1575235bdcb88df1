"""Which kube-scheduler release the engine follows: the allocator's behaviour differs per release.

The engine answers as the allocator of the cluster's Kubernetes release would
(``k8s.io/dynamic-resource-allocation/structured``, the variant kube-scheduler picks with that
release's default gates). A :class:`Release` names each behaviour that changed between the
releases the engine knows, so the code reads ``if release.x`` rather than comparing versions.
:data:`DEFAULT` is the newest; ``kubeacc plan`` takes the live server's version when it can.

Feature gates the scheduler may run with change a release's behaviour too; they are not
observable from outside kube-scheduler, so the engine assumes the release's defaults unless a
caller names gates (:func:`parse_gates`, ``kubeacc plan --feature-gates``). The one it follows:
``DRADeviceCompatibilityGroups`` (alpha in v1.37, off by default).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace


class ReleaseError(ValueError):
    """A Kubernetes version the engine does not follow."""


@dataclass(frozen=True)
class Release:
    #: ``1.36``, ``1.37``
    name: str
    #: slices with shared counters count for every node, whatever node they target (v1.36);
    #: from v1.37 only slices that target the node are gathered, and a counter slice that does
    #: not is fetched with the rest of the pool when the pool looks incomplete from the node
    counters_everywhere: bool
    #: an ``All`` request gathers only devices whose *static* capacity fits (v1.37): a matching
    #: device whose remaining capacity is too small stays in the set and the request fails;
    #: v1.36 skips it while gathering
    all_static_capacity: bool
    #: ``string.format`` rejects at compile time an argument whose static type suits no clause,
    #: such as an attribute value not wrapped in ``dyn`` (v1.36, cel-go v0.26); v1.37 (cel-go
    #: v0.29) lets it compile and judges the value at run time
    format_static_types: bool
    #: ``distinctAttribute`` compares a device with every device added before it (v1.37);
    #: v1.36 keeps one value per request, so a value can repeat at count >= 3
    distinct_every_value: bool
    #: a device config that names every request of the claim (or the subrequest chosen) is
    #: written without ``requests`` ("empty means all", v1.37); v1.36 keeps the list
    config_for_all_unnamed: bool
    #: counters a search is taking are kept per driver and pool (v1.37); v1.36 keeps them per
    #: pool name, so equally named pools of two drivers draw on one tally
    counters_per_driver: bool
    #: a capacity request the range arithmetic cannot represent (above MaxInt64, or rounding
    #: up to a step past it) or a negative consumed value fails the pod (v1.37); v1.36 computes
    #: in wrapping 64-bit arithmetic and has no such error
    capacity_errors_fail_pod: bool
    #: a slice with a device that lists ``consumesCounters[].compatibilityGroups`` is ignored,
    #: so its pool is incomplete (v1.37 with the alpha gate DRADeviceCompatibilityGroups off,
    #: the default: the allocator cannot check the groups, so it allocates nothing of the
    #: pool); v1.36's API has no such field and uses the slice
    compatibility_group_slices_ignored: bool
    #: devices on one counter set go together only while their compatibility groups intersect
    #: (v1.37 with DRADeviceCompatibilityGroups on: kubeacc.engine.compatgroups)
    compatibility_groups: bool = False
    #: the feature gates named on top of the release's defaults, as given
    gates: tuple[tuple[str, bool], ...] = ()


#: gates the engine follows -> the releases that have them
GATES: dict[str, tuple[str, ...]] = {"DRADeviceCompatibilityGroups": ("1.37",)}


RELEASES: dict[str, Release] = {
    "1.36": Release(
        "1.36",
        counters_everywhere=True,
        all_static_capacity=False,
        format_static_types=True,
        distinct_every_value=False,
        config_for_all_unnamed=False,
        counters_per_driver=False,
        capacity_errors_fail_pod=False,
        compatibility_group_slices_ignored=False,
    ),
    "1.37": Release(
        "1.37",
        counters_everywhere=False,
        all_static_capacity=True,
        format_static_types=False,
        distinct_every_value=True,
        config_for_all_unnamed=True,
        counters_per_driver=True,
        capacity_errors_fail_pod=True,
        compatibility_group_slices_ignored=True,
    ),
}
DEFAULT = "1.37"

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+].*)?$")


def release(
    version: str | Release | None = None, gates: Mapping[str, bool] | None = None
) -> Release:
    """The release for ``version`` (``1.37``, ``v1.37.2``, a server's ``gitVersion`` such as
    ``v1.37.2+k3s1``); None: :data:`DEFAULT`; with ``gates`` on top of its defaults (see
    :func:`with_gates`). Raises :class:`ReleaseError` for others."""
    if isinstance(version, Release):
        return with_gates(version, gates) if gates else version
    if version is None:
        return with_gates(RELEASES[DEFAULT], gates) if gates else RELEASES[DEFAULT]
    m = _VERSION_RE.match(version.strip())
    key = f"{m.group(1)}.{m.group(2)}" if m else version
    found = RELEASES.get(key)
    if found is None:
        raise ReleaseError(
            f"Kubernetes {version!r} is not a release the engine follows; "
            f"choose one of {', '.join(sorted(RELEASES))}"
        )
    return with_gates(found, gates) if gates else found


def with_gates(rel: Release, gates: Mapping[str, bool] | None) -> Release:
    """``rel`` as kube-scheduler runs it with ``gates`` set; a gate the engine does not follow,
    or one the release does not have, is an error (nothing is assumed)."""
    if not gates:
        return rel
    for name in gates:
        have = GATES.get(name)
        if have is None:
            raise ReleaseError(
                f"feature gate {name!r} is not one the engine follows; known: "
                f"{', '.join(sorted(GATES))}"
            )
        if rel.name not in have:
            raise ReleaseError(f"feature gate {name} does not exist in Kubernetes {rel.name}")
    named = dict(rel.gates)
    named.update(gates)
    groups = named.get("DRADeviceCompatibilityGroups", False)
    return replace(
        RELEASES[rel.name],
        compatibility_groups=groups,
        compatibility_group_slices_ignored=RELEASES[rel.name].compatibility_group_slices_ignored
        and not groups,
        gates=tuple(sorted(named.items())),
    )


def parse_gates(text: str) -> dict[str, bool]:
    """``Name=true,Other=false`` (kube-scheduler's ``--feature-gates`` syntax) as a mapping;
    raises :class:`ReleaseError` on anything else."""
    out: dict[str, bool] = {}
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        name, value = name.strip(), value.strip().lower()
        if not sep or not name or value not in ("true", "false"):
            raise ReleaseError(
                f"feature gate {part!r} is not NAME=true or NAME=false (e.g. "
                "DRADeviceCompatibilityGroups=true)"
            )
        out[name] = value == "true"
    return out
