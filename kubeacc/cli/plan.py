"""``kubeacc plan``: where would these ResourceClaims be allocated, or why not.

Reads every ``*.yaml``/``*.yml``/``*.json`` file under a folder (multi-document YAML and ``List``
kinds are fine), or, without a folder, the live objects of the cluster the kubeconfig names
(``--kubeconfig``, ``$KUBECONFIG``, in-cluster, ``~/.kube/config``), sorts the objects by kind
(ResourceSlice, DeviceClass, ResourceClaim, Node, Pod), treats claims that already carry
``status.allocation`` as existing allocations, and plans the others in order. The pending claims
one Pod references (``spec.resourceClaims``: ``resourceClaimName``, or the claim a template made,
named in ``status.resourceClaimStatuses``) are placed together, as kube-scheduler allocates a
pod's claims in one go (all on one node, or none); a pod that references a claim missing from the
input is not placed (the scheduler waits for the claim). A pending pod asking an extended resource
that a DeviceClass serves (``kubeacc.io/gpu: 2``) is planned with the claim kube-scheduler would
make for it (kubeacc.engine.extended), or left to a node's device plugin. Prints a
table, or JSON / YAML with ``-o json`` / ``-o yaml``. Verdicts are kube-scheduler's (its
allocator's quirks included); an explanation names the scheduler deviation when one decides
(docs/placement.md, "Deviations").
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from kubeacc.cli.errors import fail
from kubeacc.cli.options import (
    AllNamespacesOption,
    ContextOption,
    KubeconfigOption,
    NamespaceOption,
    UnitsTableOption,
    namespace_scope,
    use_units_table,
)
from kubeacc.cli.output import Format, OutputOption, dump, is_table, print_table
from kubeacc.cli.planfix import Fixes, NodeShapes, find_fixes
from kubeacc.cli.planheld import HEADER, Held, held_devices, wants_pod
from kubeacc.cli.planhints import unknown_memory_hint
from kubeacc.cli.planpodgroups import read_pod_groups, volcano_namespaces
from kubeacc.cli.planscheduler import other_schedulers
from kubeacc.cli.typerize import typer_command
from kubeacc.engine.engine import Engine, Placement
from kubeacc.engine.explain import Explanation
from kubeacc.engine.extended import (
    ExtendedResourceError,
    PodExtended,
    asks_extended,
    pending_extended,
    plugin_use,
)
from kubeacc.engine.release import Release, ReleaseError, parse_gates, release, with_gates
from kubeacc.engine.taintrules import apply_taint_rules
from kubeacc.safeyaml import InputError, load_file
from kubeacc.units.explain import preference_lines, why_not


def load_objects(folder: Path) -> list[dict[str, Any]]:
    """The objects of the folder's files; :class:`InputError` (one line) for a file that is
    not a regular file, too large, not text, or YAML too deep or alias-expanding."""
    objs: list[dict[str, Any]] = []
    files = sorted(p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
    for path in files:
        for doc in load_file(path):
            if not isinstance(doc, dict):
                continue
            if doc.get("kind", "").endswith("List") and isinstance(doc.get("items"), list):
                objs.extend(i for i in doc["items"] if isinstance(i, dict))
            else:
                objs.append(doc)
    return objs


def cluster_objects(
    kubeconfig: Path | None, namespace: str | None = None, context: str | None = None
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """ResourceSlices, DeviceClasses, Nodes, ResourceClaims, Pods and the Volcano pods'
    PodGroups of a live cluster, as dicts; and the namespaces whose PodGroups could not be
    read, with why (kubeacc.cli.planpodgroups)."""
    from lightkube.resources.core_v1 import Node, Pod
    from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice

    from kubeacc.clientconfig import make_client

    client = make_client(kubeconfig, context=context)
    objs: list[dict[str, Any]] = []
    for kind, name in (
        (ResourceSlice, "ResourceSlice"),
        (DeviceClass, "DeviceClass"),
        (Node, "Node"),
    ):
        objs += [{**o.to_dict(), "kind": name} for o in client.list(kind)]  # type: ignore[attr-defined]
    objs += _taint_rules(client)
    # Devices are shared by the whole cluster: claims allocated in any namespace hold theirs,
    # whatever namespace is being planned. Only the pending claims are limited to it.
    for o in client.list(ResourceClaim, namespace="*"):
        claim = {**o.to_dict(), "kind": "ResourceClaim"}
        mine = namespace is None or claim["metadata"].get("namespace") == namespace
        if mine or (claim.get("status") or {}).get("allocation"):
            objs.append(claim)
    # Pods group the pending claims they reference (placed together); the extender's and the
    # device plugin's pods say who holds what (--held).
    for po in client.list(Pod, namespace="*"):
        pod = {**po.to_dict(), "kind": "Pod"}
        mine = namespace is None or pod["metadata"].get("namespace") == namespace
        if mine and (wants_pod(pod) or asks_extended(pod)):
            objs.append(pod)
        elif asks_extended(pod) and (pod.get("spec") or {}).get("nodeName"):
            objs.append(pod)  # what device plugins gave out is the whole cluster's
    groups, unread = read_pod_groups(client, volcano_namespaces(objs))
    return objs + groups, unread


def _taint_rules(client: Any) -> list[dict[str, Any]]:
    """The cluster's DeviceTaintRules (kube-scheduler taints the devices they select); none
    where ``resource.k8s.io/v1`` does not serve them (before Kubernetes 1.37)."""
    from lightkube import ApiError

    from kubeacc.controller.taintrules import DeviceTaintRule
    from kubeacc.crds.resources import as_dict, is_not_found

    try:
        return [{**as_dict(o), "kind": "DeviceTaintRule"} for o in client.list(DeviceTaintRule)]
    except ApiError as e:
        if is_not_found(e):
            return []
        raise


def run_plan(objs: list[dict[str, Any]], release: Release | None = None) -> list[Placement]:
    return [p for p, _ in run_plan_explained(objs, release=release)]


def run_plan_explained(
    objs: list[dict[str, Any]], *, explain: bool = True, release: Release | None = None
) -> list[tuple[Placement, list[str]]]:
    """Placements, each with the lines explaining its model preference (firstAvailable; none
    without ``explain``), as kube-scheduler of ``release`` places them (default: the newest
    release the engine follows)."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for o in objs:
        by_kind.setdefault(str(o.get("kind", "")), []).append(o)
    claims = by_kind.get("ResourceClaim", [])
    existing = [c for c in claims if (c.get("status") or {}).get("allocation")]
    pending = [c for c in claims if not (c.get("status") or {}).get("allocation")]
    nodes = by_kind.get("Node")
    engine = Engine(
        apply_taint_rules(by_kind.get("ResourceSlice", []), by_kind.get("DeviceTaintRule", [])),
        by_kind.get("DeviceClass", []),
        existing,
        nodes if nodes else None,
        release=release,
    )
    out: list[tuple[Placement, list[str]]] = []
    pods = by_kind.get("Pod", [])
    groups = pod_groups(pending, existing, pods)
    pod_objs = {_ref(p): p for p in pods}
    used = plugin_use(pods)
    classes = by_kind.get("DeviceClass", [])
    for group in groups:
        ext: PodExtended | None = None
        if group.pod is not None and group.pod in pod_objs:
            try:
                ext = pending_extended(pod_objs[group.pod], classes, used)
            except ExtendedResourceError as err:
                for ref in [_ref(c) for c in group.claims] or [f"{group.pod}-extended-resources"]:
                    expl = Explanation(ref, [f"pod {group.pod}: {err}"])
                    out.append((Placement(ref, None, None, explanation=expl, pod=group.pod), []))
                continue
        if not group.claims and ext is None:
            continue  # nothing of this pod is planned through DRA
        if group.missing:
            for ref in [_ref(c) for c in group.claims] + ([ext.claim_ref] if ext else []):
                why = f"pod {group.pod}: {'; '.join(group.missing)} (kube-scheduler waits for it)"
                expl = Explanation(ref, [why])
                out.append((Placement(ref, None, None, explanation=expl, pod=group.pod), []))
            continue
        tried = [why_not(engine, c) if explain else {} for c in group.claims]
        if group.pod is None:  # as Engine.plan, one after another
            placements = [engine.allocate(group.claims[0])]
        else:
            placed = engine.allocate_pod(group.claims, pod=group.pod, extended=ext)
            placements = placed.placements
            tried += [{}] * (len(placements) - len(tried))  # the extended resources' claim
        for t, placement in zip(tried, placements, strict=True):
            out.append((placement, preference_lines(t, placement) if t else []))
    return out


@dataclass
class PodGroup:
    """Pending claims placed together: a pod's (``pod`` its namespace/name), or one claim no pod
    in the input references (``pod`` None)."""

    pod: str | None
    claims: list[dict[str, Any]]
    #: claims the pod references that the input lacks: the pod cannot be scheduled yet
    missing: list[str] = field(default_factory=list)


def _ref(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '?')}"


def _pod_claim_refs(pod: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(entry name, namespace/claim name or None when its template made none yet), in order."""
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    made = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in ((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        if isinstance(s, dict)
    }
    out: list[tuple[str, str | None]] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        if not isinstance(entry, dict):
            continue
        entry_name = str(entry.get("name", "?"))
        name = entry.get("resourceClaimName") or made.get(entry_name)
        out.append((entry_name, f"{ns}/{name}" if name else None))
    return out


def pod_groups(
    pending: list[dict[str, Any]], existing: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> list[PodGroup]:
    """The pending claims in input order, those of one pod gathered where the pod's first one
    comes (a claim two pods share goes with the first pod that names it); then the pods with
    none that ask extended resources (a DeviceClass may serve them)."""
    by_ref = {_ref(c): c for c in pending}
    allocated = {_ref(c) for c in existing}
    owner: dict[str, PodGroup] = {}
    #: pods without pending claims that ask extended resources (planned after the others)
    extended_only: list[PodGroup] = []
    for pod in pods:
        group = PodGroup(_ref(pod), [])
        for entry, ref in _pod_claim_refs(pod):
            if ref is None:
                group.missing.append(f"the claim of resourceClaims[{entry}] is not created yet")
            elif ref in by_ref:
                if ref not in owner:
                    owner[ref] = group
                    group.claims.append(by_ref[ref])
            elif ref not in allocated:
                group.missing.append(f"claim {ref} not found")
        if not group.claims and asks_extended(pod):
            extended_only.append(group)
    out: list[PodGroup] = []
    emitted: set[int] = set()
    for c in pending:
        mine = owner.get(_ref(c))
        if mine is None:
            out.append(PodGroup(None, [c]))
        elif id(mine) not in emitted:
            emitted.add(id(mine))
            out.append(mine)
    return out + extended_only


@typer_command
def plan(
    folder: Annotated[
        Path | None,
        typer.Argument(
            help="Folder of YAML/JSON: slices, classes, claims (default: the live cluster)",
            exists=True,
            file_okay=False,
        ),
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    namespace: NamespaceOption = None,
    all_namespaces: AllNamespacesOption = False,
    output: OutputOption = Format.TABLE,
    units_table: UnitsTableOption = None,
    add_node: Annotated[
        list[str] | None,
        typer.Option(
            "--add-node",
            metavar="PROFILE[:NAME]",
            help="Plan as if a node like this synthetic host profile had joined (dgx-h100, "
            "l4-pair, h100-l4, ...; an unknown name lists them); repeatable.",
        ),
    ] = None,
    held: Annotated[
        bool,
        typer.Option(
            "--held",
            help="Only who holds each device: claim, pods and path (DRA, extender, device "
            "plugin), in every format (the table shows it after the plan).",
        ),
    ] = False,
    fixes: Annotated[
        bool,
        typer.Option(
            "--fixes",
            help="For each claim that does not fit, the smallest change that would make it fit "
            "(free which claims, relax which selector, add which node shape), each found by "
            "re-planning with the change made.",
        ),
    ] = False,
    kubernetes_version: Annotated[
        str | None,
        typer.Option(
            "--kubernetes-version",
            metavar="VERSION",
            help="Plan as kube-scheduler of this release allocates (1.36, 1.37; default: the "
            "live cluster's API server version, or the newest for a folder).",
        ),
    ] = None,
    feature_gates: Annotated[
        str | None,
        typer.Option(
            "--feature-gates",
            metavar="NAME=true,...",
            envvar="KUBEACC_PLAN_FEATURE_GATES",
            help="Plan as kube-scheduler runs with these feature gates on top of the release's "
            "defaults (its --feature-gates syntax; kube-scheduler's gates cannot be read from "
            "the cluster, so the defaults are assumed otherwise). Followed: "
            "DRADeviceCompatibilityGroups (1.37, alpha, off by default).",
        ),
    ] = None,
) -> None:
    """Show where each ResourceClaim would be allocated, or why it cannot be, and who holds
    the devices already given out.

    With a cluster, the pending claims of every namespace are planned (-A, the default: they
    compete for the same devices); -n NS plans only those of NS, against every allocation.
    """
    use_units_table(units_table)
    scope = namespace_scope(namespace, all_namespaces)
    if folder is not None and (kubeconfig is not None or context is not None):
        fail("give a folder or --kubeconfig/--context, not both")
    unread: dict[str, str] = {}
    try:
        if folder is not None:
            objs = load_objects(folder)
        else:
            objs, unread = cluster_objects(kubeconfig, scope, context)
    except InputError as err:
        fail(str(err))
    for reason in sorted(set(unread.values())):
        typer.echo(f"Volcano's gangs and queues unknown: {reason}", err=True)
    holders = held_devices(objs, scope)
    if add_node:
        from kubeacc.cli.planwhatif import WhatIfError, add_nodes

        try:
            for note in add_nodes(objs, add_node):
                typer.echo(f"what-if: {note}", err=True)
        except WhatIfError as err:
            fail(str(err))
    if held:
        _print_held(holders, output)
        return
    which = _release(kubernetes_version, folder, kubeconfig, context)
    if feature_gates:
        try:
            which = with_gates(which, parse_gates(feature_gates))
        except ReleaseError as err:
            fail(str(err))
    explained = run_plan_explained(objs, release=which)
    placements = [p for p, _ in explained]
    hints = {p.claim: unknown_memory_hint(objs, p) for p in placements}
    enforcement = share_enforcement(objs)
    others = other_schedulers(objs, unread)
    found = _find_fixes(objs, placements, which) if fixes else {}
    if is_table(output) and not placements:
        typer.echo("No pending ResourceClaims: nothing to plan.")
    elif is_table(output):
        sizes = Counter(p.pod for p in placements if p.pod is not None)
        together = any(n > 1 for n in sizes.values())  # pods placed together: say which
        print_table(
            ("POD", "CLAIM", "NODE", "DEVICES", "WHY NOT")
            if together
            else ("CLAIM", "NODE", "DEVICES", "WHY NOT"),
            [
                [p.pod or "-", *_row(p, enforcement, hints[p.claim])]
                if together
                else _row(p, enforcement, hints[p.claim])
                for p in placements
            ],
            title="kubeacc plan",
            wrap=("DEVICES", "WHY NOT"),
            wide=output is Format.WIDE,
        )
        notes = [(p.claim, lines) for p, lines in explained if lines]
        if notes:
            typer.echo("\nModel preferences (firstAvailable):")
            for claim, lines in notes:
                typer.echo(f"{claim}:")
                for line in lines:
                    typer.echo(f"  {line}")
        elsewhere = {p.pod: others[p.pod] for p in placements if p.pod in others}
        if elsewhere:
            typer.echo("\nPods another scheduler places; not predicted:")
            for pod, other in elsewhere.items():
                typer.echo(f"{pod} ({other.name}):")
                for line in other.not_predicted:
                    typer.echo(f"  {line}")
        if found:
            typer.echo("\nSmallest changes that would make it fit (each re-planned with it made):")
            for key, result in found.items():
                typer.echo(f"{key}:")
                for line in result.lines():
                    typer.echo(f"  {line}")
    if is_table(output):
        typer.echo("")
        _print_held(holders, output)
    else:
        docs = [
            {
                **p.to_dict(),
                **({"preference": lines} if lines else {}),
                **({"hints": hints[p.claim]} if hints[p.claim] else {}),
                **({"shares": shares} if (shares := _shares(p, enforcement)) else {}),
                **({"fixes": found[key].to_dict()} if (key := _group_key(p)) in found else {}),
                **({"scheduler": others[p.pod].to_dict()} if p.pod in others else {}),
            }
            for p, lines in explained
        ]
        sys.stdout.write(dump(docs, output))
    if any(not p.ok for p in placements):
        raise typer.Exit(code=1)


def _group_key(p: Placement) -> str:
    """What one fix search is for: the pod whose claims go together, else the claim."""
    return f"pod {p.pod}" if p.pod is not None else p.claim


def _release(
    version: str | None, folder: Path | None, kubeconfig: Path | None, context: str | None
) -> Release:
    """The release to plan as: the one asked for (an unknown one is an error), else the live
    API server's, else the newest. A server release the engine does not follow is planned as
    the newest, with a note on stderr."""
    if version is not None:
        try:
            return release(version)
        except ReleaseError as err:
            fail(str(err))
    if folder is not None:
        return release()
    served = server_version(kubeconfig, context)
    try:
        return release(served)
    except ReleaseError:
        typer.echo(
            f"plan: the API server runs Kubernetes {served}, not a release the engine follows; "
            f"planning as kube-scheduler {release().name} (--kubernetes-version to choose)",
            err=True,
        )
        return release()


def server_version(kubeconfig: Path | None, context: str | None) -> str | None:
    """The live API server's ``gitVersion`` (None when ``/version`` does not answer)."""
    from kubeacc.clientconfig import make_client
    from kubeacc.status.cluster import _raw_get

    try:
        got = _raw_get(make_client(kubeconfig, context=context), "/version")
        got.raise_for_status()
        return str(got.json().get("gitVersion")) or None
    except Exception:  # an older or locked-down server: plan as the newest release
        return None


def _find_fixes(
    objs: list[dict[str, Any]], placements: list[Placement], release: Release
) -> dict[str, Fixes]:
    """The fixes per failed pod (its claims together) or claim; a pod waiting for a claim
    that does not exist yet gets none (no change of devices helps it)."""
    groups: dict[str, list[str]] = {}
    for p in placements:
        waiting = p.explanation is not None and any(
            "kube-scheduler waits for it" in line for line in p.explanation.general
        )
        if not p.ok and not waiting:
            groups.setdefault(_group_key(p), []).append(p.claim)

    def planner(changed: list[dict[str, Any]]) -> set[str]:
        return {
            p.claim for p, _ in run_plan_explained(changed, explain=False, release=release) if p.ok
        }

    shapes = NodeShapes(objs)
    return {key: find_fixes(objs, claims, planner, shapes) for key, claims in groups.items()}


def _print_held(holders: list[Held], output: Format) -> None:
    if not is_table(output):
        sys.stdout.write(dump([h.to_dict() for h in holders], output))
    elif not holders:
        typer.echo("No device is held (no allocated claim, no extender or device plugin pod).")
    else:
        typer.echo("Held devices (who holds each, and by which path):")
        print_table(
            HEADER,
            [h.row() for h in holders],
            wrap=("DEVICE", "CLAIM", "PODS"),
            wide=output is Format.WIDE,
        )


def share_enforcement(objs: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(pool, device) -> what holds a share of that device to its limits, as the node's
    slice says (attribute ``shareEnforcement``; docs/sharing.md)."""
    out = {}
    for o in objs:
        if o.get("kind") != "ResourceSlice":
            continue
        spec = o.get("spec") or {}
        pool = (spec.get("pool") or {}).get("name", "")
        for d in spec.get("devices") or []:
            how = ((d.get("attributes") or {}).get("shareEnforcement") or {}).get("string")
            if how:
                out[(pool, d.get("name", ""))] = str(how)
    return out


def _shares(p: Placement, enforcement: dict[tuple[str, str], str]) -> dict[str, str]:
    """Request -> how its share is enforced, for the results that are shares."""
    if p.allocation is None:
        return {}
    return {
        r["request"]: enforcement.get((r["pool"], r["device"]), "advisory")
        for r in p.allocation["devices"]["results"]
        if r.get("shareID")
    }


def _row(
    p: Placement, enforcement: dict[tuple[str, str], str], hints: Sequence[str] = ()
) -> list[str]:
    if p.allocation is not None:
        shares = _shares(p, enforcement)
        devs = ", ".join(
            f"{r['request']}: {r['pool']}/{r['device']}"
            + (f" (share, {shares[r['request']]})" if r["request"] in shares else "")
            for r in p.allocation["devices"]["results"]
        )
        served = (p.extended or {}).get("devicePlugin") or {}
        plugin = ", ".join(f"{k}: {v} by the device plugin" for k, v in served.items())
        devs = ", ".join(x for x in (devs, plugin) if x)
        return [p.claim, p.node or "(any)", devs, ""]
    why = "\n".join([*(p.explanation.lines() if p.explanation else ["unknown"]), *hints])
    return [p.claim, "-", "-", why]
