"""Drain by eviction on the testbed: a Drain operation with ``spec.evict`` creates a
DeviceTaintRule, the real kube-controller-manager evicts the pod that holds the GPU, the drain
succeeds, and Uncordon deletes the rule; a drained GPU's MIG partitions and a drained NIC's
VFs get rules of their own, and a VF enabled while its NIC is drained gets one from the
controller."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Event, Pod
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.agent.dra.publishing import KINDS
from kubeacc.controller import taintrules
from kubeacc.controller.controller import Controller
from kubeacc.controller.taintrules import DRAIN_TAINT, DeviceTaintRule, rule_name
from kubeacc.crds.resources import as_dict
from kubeacc.testbed.identities import token_client
from kubeacc.testbed.testbed import Testbed
from tests.nodestack import allocated_device, claim, claim_pod, node_stack, pod_phase
from tests.testbed.helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kubeacc_crds", "kubeacc_cleanup")]


def _gone(client: Client, kind: type, name: str, ns: str | None = None) -> bool:
    try:
        if ns is None:
            client.get(kind, name)
        else:
            client.get(kind, name, namespace=ns)
    except ApiError as exc:
        return exc.status.code == 404
    return False


def test_a_drain_with_evict_taints_the_gpu_and_its_pod_is_evicted(
    testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    with node_stack(testbed, tmp_path, "dgx-h100") as stack:
        kube_client.create(claim("train", ns, "gpu.kubeacc.io"))
        kube_client.create(claim_pod("trainer", ns, "train"))
        eventually(lambda: pod_phase(kube_client, "trainer", ns) == "Running", 90, "pod Running")
        gpu = allocated_device(kube_client, "train", ns)
        assert gpu is not None
        acc = f"{stack.node}-{gpu}"
        eventually(lambda: gpu in stack.accelerators(), 60, "the GPU's Accelerator")

        stack.operation(ns, "evict", "Drain", [acc], evict=True, timeoutSeconds=120)
        got = eventually(
            lambda: (
                not _gone(kube_client, DeviceTaintRule, rule_name(acc))
                and as_dict(kube_client.get(DeviceTaintRule, rule_name(acc)))
            ),
            30,
            "the DeviceTaintRule",
        )
        assert got["spec"]["deviceSelector"] == {
            "driver": "kubeacc.io",
            "pool": stack.node,
            "device": gpu,
        }
        assert (got["spec"]["taint"]["key"], got["spec"]["taint"]["effect"]) == (
            DRAIN_TAINT,
            "NoExecute",
        )
        # the kube-controller-manager's device-taint eviction deletes the pod; nobody else does
        eventually(lambda: _gone(kube_client, Pod, "trainer", ns), 60, "the pod evicted")
        op = stack.finished(ns, "evict", 120)
        assert op["status"]["phase"] == "Succeeded", op["status"]
        reasons = {
            e.reason
            for e in kube_client.list(Event, namespace=ns)
            if e.involvedObject and e.involvedObject.name == "evict"
        }
        assert "DeviceTaintRuleCreated" in reasons, reasons

        stack.operation(ns, "lift", "Uncordon", [acc])
        op = stack.finished(ns, "lift", 60)
        assert op["status"]["phase"] == "Succeeded", op["status"]
        assert f"DeviceTaintRules deleted: {rule_name(acc)}" in op["status"]["message"]
        assert _gone(kube_client, DeviceTaintRule, rule_name(acc))


def test_a_drained_gpus_partitions_and_a_drained_nics_vfs_are_evicted_too(
    testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    """The pods hold a MIG partition and a VF, devices of their own in the slices: the drain of
    their GPU and NIC (the Accelerators) covers them with rules of their own."""
    ns = namespace
    every_kind = [f"--dra-publish={kind}" for kind in KINDS]  # VFs are published on request
    with node_stack(testbed, tmp_path, "dgx-h100", agent_args=every_kind) as stack:
        # each NIC's last VF is not enabled yet: it appears while its NIC is drained
        hidden = {pf: _hide_last_vf(stack.host, pf, tmp_path / "hidden") for pf in _pfs(stack.host)}
        eventually(
            lambda: all(stack.slice_device(vf) is None for vf, _ in hidden.values()),
            30,
            "the last VFs unpublished",
        )
        vf = 'has(device.attributes["kubeacc.io"].sriovVF)'
        kube_client.create(claim("part", ns, "mig.kubeacc.io"))
        kube_client.create(claim("vf", ns, "nic.kubeacc.io", vf))
        for pod, held in (("on-mig", "part"), ("on-vf", "vf")):
            kube_client.create(claim_pod(pod, ns, held))
        for pod in ("on-mig", "on-vf"):
            eventually(lambda p=pod: pod_phase(kube_client, p, ns) == "Running", 90, pod)
        partition = allocated_device(kube_client, "part", ns)
        function = allocated_device(kube_client, "vf", ns)
        assert partition is not None and function is not None
        gpu, _, part_suffix = partition.partition("-mig-")
        pf, _, vf_index = function.rpartition("-vf")
        accs = [f"{stack.node}-{gpu}", f"{stack.node}-{pf}"]
        eventually(lambda: {gpu, pf} <= set(stack.accelerators()), 60, "the Accelerators")

        # no drain in force: the controller reads no slices
        assert not stack.controller.drains.watching
        stack.operation(ns, "evict", "Drain", accs, evict=True, timeoutSeconds=120)
        for acc, device, suffix in (
            (accs[0], partition, f"mig-{part_suffix}"),
            (accs[1], function, f"vf{vf_index}"),
        ):
            name = rule_name(acc, suffix)
            got = eventually(
                lambda n=name: (
                    not _gone(kube_client, DeviceTaintRule, n)
                    and as_dict(kube_client.get(DeviceTaintRule, n))
                ),
                30,
                name,
            )
            assert got["spec"]["deviceSelector"]["device"] == device
            assert got["metadata"]["annotations"]["kubeacc.io/accelerator"] == acc
        for pod in ("on-mig", "on-vf"):
            eventually(lambda p=pod: _gone(kube_client, Pod, p, ns), 60, f"{pod} evicted")
        op = stack.finished(ns, "evict", 120)
        assert op["status"]["phase"] == "Succeeded", op["status"]

        # a VF enabled while its NIC is drained gets its rule from the controller
        late, show = hidden[_bdf(pf)]
        late_rule = rule_name(accs[1], late.rpartition("-")[2])
        assert _gone(kube_client, DeviceTaintRule, late_rule)
        before = _rules_metric(stack.controller, "created")
        show()
        eventually(lambda: stack.slice_device(late) is not None, 30, f"{late} published")
        got = eventually(
            lambda: (
                not _gone(kube_client, DeviceTaintRule, late_rule)
                and as_dict(kube_client.get(DeviceTaintRule, late_rule))
            ),
            30,
            late_rule,
        )
        assert got["spec"]["deviceSelector"] == {
            "driver": "kubeacc.io",
            "pool": stack.node,
            "device": late,
        }
        assert got["metadata"]["annotations"] == {
            "kubeacc.io/operation": f"{ns}/evict",
            "kubeacc.io/accelerator": accs[1],
        }
        assert _rules_metric(stack.controller, "created") == before + 1
        appeared = [
            e.message or ""
            for e in kube_client.list(Event, namespace=ns)
            if e.involvedObject
            and e.involvedObject.name == "evict"
            and e.reason == "DeviceTaintRuleCreated"
        ]
        assert any(late in m and "appeared" in m for m in appeared), appeared
        created = _rules_metric(stack.controller, "created")
        assert created >= 2 + 2 + 1  # both devices, at least the two held, the late VF

        assert stack.controller.drains.watching
        stack.operation(ns, "lift", "Uncordon", accs)
        op = stack.finished(ns, "lift", 60)
        assert op["status"]["phase"] == "Succeeded", op["status"]
        # the last drain lifted: the slice watch stops
        eventually(lambda: not stack.controller.drains.watching, 30, "the slice watch closed")
        left = [
            r.metadata.name
            for r in kube_client.list(DeviceTaintRule)
            if r.metadata is not None
            and (r.metadata.annotations or {}).get("kubeacc.io/accelerator") in accs
        ]
        assert left == []
        assert _rules_metric(stack.controller, "deleted") == created
        reasons = {
            e.reason
            for e in kube_client.list(Event, namespace=ns)
            if e.involvedObject and e.involvedObject.name in ("evict", "lift")
        }
        assert {"DeviceTaintRuleCreated", "DeviceTaintRuleDeleted"} <= reasons, reasons

        # the controller's own ClusterRole (deploy/rbac/controller.yaml) allows all of it
        ctl = token_client(testbed, tmp_path, namespace="kube-system", account="kubeacc-controller")
        made = taintrules.ensure(ctl, accs[0], stack.node, gpu, f"{ns}/rbac")
        assert rule_name(accs[0], f"mig-{part_suffix}") in made
        assert sorted(taintrules.remove(ctl, accs[0])) == sorted(made)
        # ... and the watch of the slices whose partitions and VFs drains follow
        for _, seen in ctl.watch(ResourceSlice, fields={"spec.driver": "kubeacc.io"}):
            assert as_dict(seen)["spec"]["driver"] == "kubeacc.io"
            break


def _bdf(device: str) -> str:
    """``nic-0000-5e-00-0`` -> ``0000:5e:00.0``."""
    domain, bus, slot, fn = device.split("-")[1:5]
    return f"{domain}:{bus}:{slot}.{fn}"


def _pfs(host: Path) -> list[str]:
    """The BDFs of the host's network functions with SR-IOV VFs enabled."""
    devices = host / "sys/bus/pci/devices"
    return sorted(
        d.name
        for d in devices.iterdir()
        if (d / "class").read_text().startswith("0x02") and any(d.glob("virtfn*"))
    )


def _hide_last_vf(host: Path, pf: str, store: Path) -> tuple[str, Callable[[], None]]:
    """Take ``pf``'s last VF out of the synthetic sysfs, as if one fewer VF were enabled; the
    VF's device name and the function that enables it again (as a write of sriov_numvfs would)."""
    store.mkdir(exist_ok=True)
    devices = host / "sys/bus/pci/devices"
    links = sorted(
        (p for p in (devices / pf).iterdir() if p.name[6:].isdigit() and p.name[:6] == "virtfn"),
        key=lambda p: int(p.name[6:]),
    )
    last = links[-1]
    vf = Path(os.readlink(last)).name
    numvfs = devices / pf / "sriov_numvfs"
    count = int(numvfs.read_text())
    moves = [(last, store / f"{pf}-{last.name}"), (devices / vf, store / vf)]
    for here, there in moves:
        os.rename(here, there)
    numvfs.write_text(f"{count - 1}\n")

    def show() -> None:
        for here, there in moves:
            os.rename(there, here)
        numvfs.write_text(f"{count}\n")

    name = "nic-" + pf.replace(":", "-").replace(".", "-")
    return f"{name}-vf{len(links) - 1}", show


def _rules_metric(controller: Controller, step: str) -> float:
    value = controller.metrics.registry.get_sample_value(
        "kubeacc_controller_device_taint_rules_total", {"step": step}
    )
    return value or 0.0
