"""The checks of the cluster as a whole: API server version and ``resource.k8s.io/v1``, the DRA
feature gates kube-acc relies on, its CRDs, the controller's leader Lease, the extender."""

from __future__ import annotations

import datetime as dt
import email.utils
import re
from typing import Any

import httpx2
from lightkube import ApiError, Client
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.coordination_v1 import Lease

from kubeacc.status.model import Check, failed, passed, skipped

CLUSTER = "cluster"
#: The oldest Kubernetes the chart installs on (charts/kubeacc/Chart.yaml kubeVersion).
MIN_VERSION = (1, 36)
CONTROLLER_LEASE = "kubeacc-controller"
DRA_GROUP = "/apis/resource.k8s.io/v1"


def _raw_get(client: Client, path: str) -> httpx2.Response:
    """GET a path that is not a resource (``/version``, API discovery) with the client's
    server, credentials and TLS. lightkube has no public call for it."""
    return client._client._client.get(path)


def api_server(client: Client) -> list[Check]:
    version = _raw_get(client, "/version")
    version.raise_for_status()
    info: dict[str, Any] = version.json()
    git = str(info.get("gitVersion", "?"))
    found = re.match(r"v?(\d+)\.(\d+)", git)
    number = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
    want = ".".join(map(str, MIN_VERSION))
    out = [
        passed("api-server", CLUSTER, f"Kubernetes {git}")
        if number >= MIN_VERSION
        else failed(
            "api-server",
            CLUSTER,
            f"Kubernetes {git}, older than {want}",
            f"upgrade the control plane to Kubernetes {want} or newer (docs/install.md)",
        )
    ]
    served = _raw_get(client, DRA_GROUP)
    if served.status_code == 200:
        out.append(passed("resource.k8s.io/v1", CLUSTER, "served"))
    else:
        out.append(
            failed(
                "resource.k8s.io/v1",
                CLUSTER,
                f"GET {DRA_GROUP}: {served.status_code}",
                "serve the DRA API: kube-apiserver --runtime-config=resource.k8s.io/v1=true "
                "(on by default from Kubernetes 1.34)",
            )
        )
    return out


def dra_gates(client: Client, node: str) -> Check:
    """Does the API server keep the slice fields kube-acc relies on (a dry-run create in
    ``node``'s pool, as the agent probes before it publishes; nothing is stored)."""
    from kubeacc.agent.dra.features import PROBE, _slice, probe

    try:  # may this identity dry-run a slice at all (the helm test's may not)?
        client.create(_slice(node, {"devices": [{"name": PROBE}]}), dry_run=True)
    except ApiError as exc:
        if exc.status.code != 403:
            raise
        return skipped(
            "dra-gates",
            CLUSTER,
            "not checked: this identity may not (dry-run) create ResourceSlices; the agents "
            "report missing gates as DRAFeaturesMissing Events on their Nodes",
        )
    dropped = probe(client, node).dropped()
    if not dropped:
        return passed(
            "dra-gates",
            CLUSTER,
            "DRADeviceTaints, DRAPartitionableDevices, DRAConsumableCapacity: fields kept",
        )
    gates = ",".join(f"{g}=true" for g in dropped)
    return failed(
        "dra-gates",
        CLUSTER,
        f"the API server drops the fields of {', '.join(dropped)} from ResourceSlices",
        f"turn the gates on: --feature-gates={gates} on kube-apiserver, kube-scheduler, "
        "kube-controller-manager and the kubelets (docs/security.md, 'Cluster features')",
    )


def crds(client: Client) -> list[Check]:
    from kubeacc.crds.manifests import crds as expected

    fix = "install them: helm upgrade with crds.install=true, or kubeacc crds | kubectl apply -f -"
    out = []
    for crd in expected():
        name = crd["metadata"]["name"]
        versions = [v["name"] for v in crd["spec"]["versions"] if v["served"]]
        try:
            got = client.get(CustomResourceDefinition, name)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            out.append(failed("crd", CLUSTER, f"{name}: not installed", fix))
            continue
        served = {v.name for v in got.spec.versions if v.served}
        missing = [v for v in versions if v not in served]
        conditions = (got.status.conditions if got.status else None) or []
        established = any(c.type == "Established" and c.status == "True" for c in conditions)
        if missing:
            out.append(failed("crd", CLUSTER, f"{name}: {', '.join(missing)} not served", fix))
        elif not established:
            out.append(
                failed("crd", CLUSTER, f"{name}: not Established", "kubectl describe crd " + name)
            )
        else:
            out.append(passed("crd", CLUSTER, f"{name}: {', '.join(versions)} served"))
    return out


def controller(client: Client, namespace: str, now: dt.datetime | None = None) -> Check:
    """The controller's leader Lease is held and renewed; ``now``: the API server's clock
    (default: the ``Date`` of its answer to ``GET /version``)."""
    fix = (
        f"is the controller running? kubectl -n {namespace} get pods "
        "-l app.kubernetes.io/name=kubeacc-controller; its logs say why it does not lead"
    )
    try:
        lease = client.get(Lease, CONTROLLER_LEASE, namespace=namespace)
    except ApiError as exc:
        if exc.status.code != 404:
            raise
        return failed(
            "controller", CLUSTER, f"no Lease {namespace}/{CONTROLLER_LEASE}: never led", fix
        )
    return lease_check(lease, now or server_now(client), fix)


def server_now(client: Client) -> dt.datetime:
    """The API server's clock (the ``Date`` of an answer); this machine's if it gives none."""
    try:
        stamp = _raw_get(client, "/version").headers.get("date")
        if stamp:
            return email.utils.parsedate_to_datetime(stamp).astimezone(dt.UTC)
    except (httpx2.HTTPError, ValueError, TypeError):
        pass
    return dt.datetime.now(dt.UTC)


def recorded_at(lease: Lease) -> dt.datetime | None:
    """When the API server last recorded a change of ``lease`` (the latest time of its
    managedFields: the server's clock at each update that changed a field, as a renewal does)."""
    times = [e.time for e in (lease.metadata.managedFields if lease.metadata else None) or []]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def lease_check(lease: Lease, now: dt.datetime, fix: str) -> Check:
    """Judge the leader Lease at the API server's ``now``: its last renewal is when the API
    server recorded it, not the holder's ``renewTime``, which is the holder's clock (a
    controller whose clock is behind stamps an old time on a Lease it renews every 2 s)."""
    spec = lease.spec
    holder = spec.holderIdentity if spec else None
    renewed = spec.renewTime if spec else None
    duration = (spec.leaseDurationSeconds if spec else None) or 15
    if not holder or renewed is None:
        return failed("controller", CLUSTER, "leader Lease released: no leader", fix)
    seen = recorded_at(lease) or renewed
    age = max(0.0, (now - seen).total_seconds())
    skew = (renewed - seen).total_seconds()
    off = f"; the holder's clock is {skew:+.0f} s off the API server's" if abs(skew) > 5 else ""
    if age > duration:
        return failed(
            "controller",
            CLUSTER,
            f"leader {holder} last renewed {age:.0f} s ago (lease {duration} s): gone{off}",
            fix,
        )
    return passed("controller", CLUSTER, f"leader {holder}, renewed {age:.0f} s ago{off}")


def extender(url: str, ca_file: str | None, timeout: float = 5) -> Check:
    """``url``'s ``/healthz`` answers 200 (the extender's probe port, or its TLS port)."""
    target = url.rstrip("/") + "/healthz"
    fix = (
        "is the extender running and its Service reachable from here? "
        "kubectl -n NAMESPACE get pods -l app.kubernetes.io/name=kubeacc-extender; "
        "kube-scheduler cannot filter or bind device-plugin pods without it (docs/extender.md)"
    )
    try:
        got = httpx2.get(target, timeout=timeout, verify=ca_file or True)
    except httpx2.HTTPError as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return failed("extender", CLUSTER, f"{target}: {reason}", fix)
    if got.status_code != 200:
        return failed("extender", CLUSTER, f"{target}: {got.status_code}", fix)
    return passed("extender", CLUSTER, f"{target}: 200")
