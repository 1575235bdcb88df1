"""Who uses a device: from prepared DRA claims and from the kubelet's pod-resources answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubeacc.agent.dra.checkpoint import PreparedClaim, PreparedDevice
from kubeacc.agent.users import (
    MAX_CONSUMERS,
    device_plugin_users,
    dra_users,
    merge,
    plugin_accounts,
)
from kubeacc.node.kubeletapi import podresources_v1_pb2 as pr
from kubeacc.node.shareaccount import AccountService
from kubeacc.node.sharelimit import CONTAINER_ACCOUNT_PREFIX, container_account

GPU = "gpu-0000-1b-00-0"
NIC = "nic-0000-2c-00-0"


def _claim(ns: str, name: str, *devices: str) -> PreparedClaim:
    return PreparedClaim(
        ns, name, [PreparedDevice(["r"], "node-a", d, [f"x-{d}"]) for d in devices], {}
    )


def test_dra_users_are_the_claim_and_its_pods() -> None:
    prepared = {"u1": _claim("team", "train", GPU, f"{NIC}-vf3")}
    claims: dict[tuple[str, str, str], dict[str, Any]] = {
        ("team", "train", "u1"): {
            "status": {
                "reservedFor": [
                    {"resource": "pods", "name": "trainer", "uid": "p1"},
                    {
                        "apiGroup": "scheduling.k8s.io",
                        "resource": "podgroups",
                        "name": "gang",
                        "uid": "g1",
                    },
                    {"apiGroup": "batch", "resource": "jobs", "name": "j", "uid": "j1"},
                    {"resource": "pods", "name": "no-uid"},
                ]
            }
        }
    }
    users = dra_users(prepared, lambda ns, n, uid: claims.get((ns, n, uid)), [GPU, NIC])
    claim = {"kind": "ResourceClaim", "namespace": "team", "name": "train", "uid": "u1"}
    pod = {"kind": "Pod", "namespace": "team", "name": "trainer", "uid": "p1"}
    # A pod group (Kubernetes 1.37 workload claims) and any other consumer hold it too.
    group = {"kind": "PodGroup", "namespace": "team", "name": "gang", "uid": "g1"}
    job = {"kind": "jobs.batch", "namespace": "team", "name": "j", "uid": "j1"}
    held = [claim, pod, group, job]
    assert users == {GPU: held, NIC: held}  # the VF counts for its PF
    # A claim the watch does not hold (yet): the claim alone.
    assert dra_users(prepared, lambda *_: None, [GPU]) == {
        GPU: [claim],
        f"{NIC}-vf3": [claim],
    }


def test_device_plugin_users_from_pod_resources() -> None:
    pods = [
        pr.PodResources(
            name="a",
            namespace="ns",
            containers=[
                pr.ContainerResources(
                    name="c",
                    devices=[
                        pr.ContainerDevices(
                            resource_name="kubeacc.io/gpu",
                            device_ids=["0000:1b:00.0", "0000:1b:00.0::1"],
                        ),
                        pr.ContainerDevices(
                            resource_name="other.io/x", device_ids=["0000:2c:00.0"]
                        ),
                    ],
                )
            ],
        )
    ]
    users = device_plugin_users(pods, {"0000:1b:00.0": GPU, "0000:2c:00.0": NIC})
    assert users == {GPU: [{"kind": "Pod", "namespace": "ns", "name": "a"}]}


def test_merge_keeps_order_drops_repeats_and_caps() -> None:
    many = [{"kind": "Pod", "namespace": "ns", "name": f"p{i}"} for i in range(MAX_CONSUMERS + 5)]
    merged = merge({GPU: many[:3]}, {GPU: many}, {NIC: many[:1]})
    assert merged[GPU] == many[:MAX_CONSUMERS]
    assert merged[NIC] == many[:1]


def test_the_accounts_to_keep_are_those_of_containers_with_kubeacc_resources(
    tmp_path: Path,
) -> None:
    def pod(name: str, resource: str) -> pr.PodResources:
        devices = [pr.ContainerDevices(resource_name=resource, device_ids=["m0-1"])]
        return pr.PodResources(
            name=name,
            namespace="ns",
            containers=[pr.ContainerResources(name="c", devices=devices)],
        )

    keep = plugin_accounts([pod("a", "kubeacc.io/gpu-memory"), pod("b", "other.io/x")])
    assert keep == {container_account("ns/a", "c")}
    # The agent closes the accounts of containers that are gone, once idle and old enough.
    accounts = AccountService(tmp_path / "acc")
    for name in (container_account("ns/a", "c"), container_account("ns/gone", "c"), "c-uid"):
        accounts.open(name, "1024")
    prefix = CONTAINER_ACCOUNT_PREFIX
    assert accounts.prune(keep, prefix, min_age=60) == []  # too young
    assert accounts.prune(keep, prefix, min_age=0) == [container_account("ns/gone", "c")]
    assert accounts.names() == {container_account("ns/a", "c"), "c-uid"}
    assert not (tmp_path / "acc" / container_account("ns/gone", "c")).exists()
    accounts.stop()
