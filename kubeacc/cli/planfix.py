"""``kubeacc plan --fixes``: the smallest change that would make a claim that does not fit fit.

Three kinds of change are tried, each by re-running the whole plan with the change made and
reading the verdict for the claims that failed (a pod's claims together), never by reasoning
about the explanation:

* **free**: delete allocated claims (the devices they hold return); single claims first, then
  pairs of them when no single one is enough;
* **relax**: drop one CEL selector of a request (``exactly`` or a ``firstAvailable``
  subrequest) or one ``constraints`` entry of the claim, or ask for fewer devices (the
  largest ``count`` below the request's that fits: "2 GPUs fit where 4 do not");
* **add-node**: a node like one of the synthetic host profiles joins (as ``--add-node``
  publishes it); the profiles that work, fewest devices first.

The re-plan keeps the input order, so a pending claim planned earlier may take what a change
frees; that is what kube-scheduler would do with the same queue. Every re-plan builds a new
engine, so the number of them per failed claim and kind of change is bounded (:data:`MAX_RUNS`);
the answer then says how many changes were tried.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from kubeacc.model.reserved import reservations

#: re-plans tried for one failed claim (or pod) at most, per kind of change
MAX_RUNS = 120
#: fitting changes of one kind reported at most (the smallest first)
MAX_SHOWN = 3

Objects = list[dict[str, Any]]
#: (objects) -> the refs of the claims the plan allocated
Planner = Callable[[Objects], set[str]]


@dataclass(frozen=True)
class Fix:
    """One change that makes the failed claims fit."""

    kind: str  # "free" | "relax" | "add-node"
    text: str
    detail: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"change": self.kind, **self.detail}


@dataclass
class Fixes:
    """The changes found for one failed claim (or the claims of one pod)."""

    claims: list[str]
    found: list[Fix] = field(default_factory=list)
    tried: int = 0
    #: the search stopped at MAX_RUNS before trying every candidate
    cut: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"tried": self.tried, "cut": self.cut, "found": [f.to_dict() for f in self.found]}

    def lines(self) -> list[str]:
        out = [f.text for f in self.found]
        if not out:
            out.append(f"no single change of the {self.tried} tried makes it fit")
        if self.cut:
            out.append(f"(a search stopped at {MAX_RUNS} re-plans; more changes were not tried)")
        return out


def _ref(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '?')}"


def _allocated(obj: dict[str, Any]) -> bool:
    return obj.get("kind") == "ResourceClaim" and bool((obj.get("status") or {}).get("allocation"))


def _device_count(claim: dict[str, Any]) -> int:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return len((alloc.get("devices") or {}).get("results") or [])


def _holders(claim: dict[str, Any]) -> list[str]:
    ns = (claim.get("metadata") or {}).get("namespace") or "default"
    return [r.ref(ns) for r in reservations(claim)]


class _Search:
    """Re-plans for one failed group, counting them against :data:`MAX_RUNS`."""

    def __init__(self, objs: Objects, targets: list[str], planner: Planner) -> None:
        self.objs = objs
        self.targets = targets
        self.planner = planner
        self.result = Fixes(list(targets))

        #: re-plans of the current kind of change (each kind has MAX_RUNS of its own, so
        #: many held claims cannot starve relaxing and node shapes)
        self.spent = 0

    def fits(self, changed: Objects) -> bool | None:
        """Whether every target is allocated in the plan of ``changed``; None: out of runs."""
        if self.spent >= MAX_RUNS:
            self.result.cut = True
            return None
        self.spent += 1
        self.result.tried += 1
        placed = self.planner(changed)
        return all(t in placed for t in self.targets)


def _free(search: _Search) -> list[Fix]:
    held = [o for o in search.objs if _allocated(o)]
    # Fewer devices first: among sets of one size, the one that gives back least is smallest.
    held.sort(key=lambda c: (_device_count(c), _ref(c)))
    for size in (1, 2):
        found: list[Fix] = []
        for group in combinations(held, size):
            ids = {id(c) for c in group}
            ok = search.fits([o for o in search.objs if id(o) not in ids])
            if ok is None:
                return found
            if ok:
                refs = [_ref(c) for c in group]
                pods = [p for c in group for p in _holders(c)]
                devices = sum(_device_count(c) for c in group)
                text = (
                    f"free claim{'s' if size > 1 else ''} {', '.join(refs)} "
                    f"({devices} device{'s' if devices != 1 else ''}; "
                    f"{'pods ' + ', '.join(pods) if pods else 'no pod'})"
                )
                found.append(Fix("free", text, {"claims": refs, "pods": pods, "devices": devices}))
                if len(found) >= MAX_SHOWN:
                    return found
        if found:
            return found
    return []


def _relaxations(claim: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(path, what is dropped, the claim without it) for each selector and constraint."""
    devices = (claim.get("spec") or {}).get("devices") or {}
    for i, req in enumerate(devices.get("requests") or []):
        if not isinstance(req, dict):
            continue
        subs: list[tuple[str, int | None, dict[str, Any]]] = []
        if isinstance(req.get("exactly"), dict):
            subs.append((f"requests[{i}].exactly", None, req["exactly"]))
        for n, sub in enumerate(req.get("firstAvailable") or []):
            if isinstance(sub, dict):
                subs.append((f"requests[{i}].firstAvailable[{n}]", n, sub))
        for where, k, body in subs:
            for j, sel in enumerate(body.get("selectors") or []):
                expr = str(((sel or {}).get("cel") or {}).get("expression", ""))
                changed = copy.deepcopy(claim)
                req_copy = changed["spec"]["devices"]["requests"][i]
                body_copy = req_copy["exactly"] if k is None else req_copy["firstAvailable"][k]
                del body_copy["selectors"][j]
                yield f"spec.devices.{where}.selectors[{j}]", expr, changed
    for i, constraint in enumerate(devices.get("constraints") or []):
        changed = copy.deepcopy(claim)
        del changed["spec"]["devices"]["constraints"][i]
        what = ", ".join(f"{k}: {v}" for k, v in sorted((constraint or {}).items()))
        yield f"spec.devices.constraints[{i}]", what, changed


def _counted(claim: dict[str, Any]) -> Iterator[tuple[str, int, Callable[[int], Any]]]:
    """(path, count, a copy of the claim with another count) for each request or
    ``firstAvailable`` subrequest asking for more than one device by count."""
    devices = (claim.get("spec") or {}).get("devices") or {}
    for i, req in enumerate(devices.get("requests") or []):
        if not isinstance(req, dict):
            continue
        bodies: list[tuple[str, int | None, Any]] = [
            (f"requests[{i}].exactly", None, req.get("exactly"))
        ]
        bodies += [
            (f"requests[{i}].firstAvailable[{n}]", n, sub)
            for n, sub in enumerate(req.get("firstAvailable") or [])
        ]
        for where, k, body in bodies:
            if (
                not isinstance(body, dict)
                or body.get("allocationMode", "ExactCount") != "ExactCount"
            ):
                continue
            count = body.get("count", 1)
            if not isinstance(count, int) or isinstance(count, bool) or count < 2:
                continue

            def recount(n: int, i: int = i, k: int | None = k) -> Any:
                changed = copy.deepcopy(claim)
                req_copy = changed["spec"]["devices"]["requests"][i]
                (req_copy["exactly"] if k is None else req_copy["firstAvailable"][k])["count"] = n
                return changed

            yield f"spec.devices.{where}.count", count, recount


def _relax(search: _Search) -> list[Fix]:
    found: list[Fix] = []
    for target in search.targets:
        original = next(
            (o for o in search.objs if o.get("kind") == "ResourceClaim" and _ref(o) == target),
            None,
        )
        if original is None:
            continue

        def fits(changed: dict[str, Any], original: dict[str, Any] = original) -> bool | None:
            return search.fits([changed if o is original else o for o in search.objs])

        for path, dropped, changed in _relaxations(original):
            ok = fits(changed)
            if ok is None:
                return found
            if ok:
                text = f"relax claim {target}: drop {path} ({dropped})"
                detail = {"claim": target, "path": path, "dropped": dropped}
                found.append(Fix("relax", text, detail))
        for path, count, recount in _counted(original):
            for fewer in range(count - 1, 0, -1):  # the largest count that fits
                ok = fits(recount(fewer))
                if ok is None:
                    return found
                if ok:
                    text = f"relax claim {target}: lower {path} from {count} to {fewer}"
                    lower: dict[str, Any] = {"claim": target, "path": path}
                    lower |= {"count": count, "fits": fewer}
                    found.append(Fix("relax", text, lower))
                    break
    return found


class NodeShapes:
    """The what-if objects of each synthetic profile, built once per plan (building and
    discovering a profile takes up to seconds)."""

    def __init__(self, objs: Objects) -> None:
        self._taken = {
            str((o.get("metadata") or {}).get("name")) for o in objs if o.get("kind") == "Node"
        } | {
            str((o.get("spec") or {}).get("nodeName"))
            for o in objs
            if o.get("kind") == "ResourceSlice"
        }
        self._with_node = any(o.get("kind") == "Node" for o in objs)
        self._built: dict[str, tuple[str, Objects, int]] | None = None

    def shapes(self) -> list[tuple[str, str, Objects, int]]:
        """(profile, node name, objects, devices), fewest devices first; profiles that
        publish no device by default (all MIG) are left out."""
        from kubeacc.cli.planwhatif import node_objects
        from kubeacc.synthetic.profiles import NAMES

        if self._built is None:
            self._built = {}
            for profile in NAMES:
                name, objs, _, count = node_objects(profile, self._taken, self._with_node)
                if count:
                    self._built[profile] = (name, objs, count)
        return sorted(
            ((p, n, o, c) for p, (n, o, c) in self._built.items()), key=lambda t: (t[3], t[0])
        )


def _add_node(search: _Search, shapes: NodeShapes) -> list[Fix]:
    found: list[Fix] = []
    for profile, name, more, count in shapes.shapes():
        ok = search.fits(search.objs + more)
        if ok is None:
            break
        if ok:
            text = f"add a node like profile {profile} ({count} devices; --add-node {profile})"
            detail = {"profile": profile, "node": name, "devices": count}
            found.append(Fix("add-node", text, detail))
            if len(found) >= MAX_SHOWN:
                break
    return found


def find_fixes(objs: Objects, targets: list[str], planner: Planner, shapes: NodeShapes) -> Fixes:
    """The changes that make every claim of ``targets`` fit (a pod's claims go together)."""
    search = _Search(objs, targets, planner)
    for kind in (_free, _relax, lambda s: _add_node(s, shapes)):
        search.spent = 0
        search.result.found += kind(search)
    return search.result
