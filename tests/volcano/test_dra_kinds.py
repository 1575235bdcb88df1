"""KunLun XPUs, MIG partitions and FPGA bitstreams through DRA under a real Volcano.

Each is a Volcano Job whose pods take their devices through a ResourceClaimTemplate; Volcano's
DRA filter allocates them from kube-acc's slices, the agent of the node prepares them and the
real kubelet runs the pods:

* 2 pods of 2 KunLun XPUs of ``xpu.kubeacc.io`` (``xpu-dra``), four distinct XPUs;
* 3 pods of one ``3g.40gb`` partition of ``mig.kubeacc.io`` on ``mig`` (an H100 and an A100 in
  MIG mode without instances): the partitions consume the GPUs' counter sets
  (DRAPartitionableDevices), so two of the gang share a GPU on placements that do not overlap,
  and each pod's prepare makes its GPU and compute instance through NVML;
* 1 pod asking the PAC N3000 of ``gpu-server`` with a bitstream (``FpgaConfig``), loaded by
  the agent at prepare: the pod runs with the card carrying the bitstream's AFU. Not before
  binding (binding conditions, the agent's default where the cluster keeps them): Volcano's
  scheduler at this commit dies binding a pod whose device has binding conditions, shown with
  a device of a driver of the test's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lightkube.codecs import from_dict
from lightkube.resources.resource_v1 import DeviceClass, ResourceSlice

from kubeacc.cli.demo_stack import KubeaccStack
from kubeacc.crds.api import API_VERSION
from kubeacc.crds.opaque import fpga_claim_config
from kubeacc.crds.resources import AcceleratorPolicy
from kubeacc.synthetic.bitstreams import bitstream
from kubeacc.synthetic.mig_state import read_calls
from tests.agent.dra.test_sharing_e2e import cdi_env
from tests.engine.helpers import device_class, slice_
from tests.hosts import discover

from ..testbed.helpers import eventually
from .conftest import VcJob, claim_template, job_pods, job_running, pod_claims, pod_spec, vcjob

pytestmark = pytest.mark.cluster

PROFILE_3G = (
    'has(device.attributes["kubeacc.io"].migProfile) && '
    'device.attributes["kubeacc.io"].migProfile == "3g.40gb"'
)
N3000 = 'device.attributes["kubeacc.io"].model.startsWith("PAC N3000")'
BITSTREAM = bitstream("n3000/crypto-offload-v3.gbs")


def _request(device_class: str, count: int = 1, cel: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    return {"name": "dev", "exactly": exactly}


def _run_job(
    stack: KubeaccStack, ns: str, spec: dict[str, Any], replicas: int, node: str | None = None
) -> list[tuple[Any, dict[str, Any]]]:
    """A Job of ``replicas`` pods (on ``node`` if given), each with a claim of the template
    ``spec``, Running; each pod with its one claim (as a dict), the claim prepared by the agent
    of the pod's node only."""
    client = stack.client("kubeacc-test")
    client.create(claim_template("dev", ns, spec))
    claims = [{"name": "dev", "resourceClaimTemplateName": "dev"}]
    pod = pod_spec(claims)
    if node:
        pod["nodeSelector"] = {"kubernetes.io/hostname": node}
    pods = [{"name": "w", "replicas": replicas, "pod": pod}]
    client.create(vcjob("job", ns, pods, replicas))
    eventually(lambda: job_running(client, ns, "job", replicas), 180, "the Job's pods Running")
    out = []
    for pod in job_pods(client, ns, "job"):
        assert pod.spec and pod.spec.schedulerName == "volcano"
        (claim,) = pod_claims(client, pod)
        for name, components in stack.nodes.items():
            prepared = claim["metadata"]["uid"] in components.agent.driver.prepared()
            assert prepared == (name == pod.spec.nodeName), (name, pod.spec.nodeName)
        out.append((pod, claim))
    return out


def _results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    return list(claim["status"]["allocation"]["devices"]["results"])


def test_kunlun_xpus_through_dra_are_placed_prepared_and_run(
    kubeacc_volcano: KubeaccStack, volcano_namespace: str
) -> None:
    stack, ns = kubeacc_volcano, volcano_namespace
    spec = {"devices": {"requests": [_request("xpu.kubeacc.io", 2)]}}
    devices = []
    for pod, claim in _run_job(stack, ns, spec, 2):
        assert pod.spec.nodeName == "xpu-dra"
        results = _results(claim)
        assert len(results) == 2 and {r["pool"] for r in results} == {"xpu-dra"}, results
        devices += [r["device"] for r in results]
        (record,) = stack.testbed.node("xpu-dra").container_records(
            namespace=ns, pod=pod.metadata.name
        )
        assert any(d.startswith("kubeacc.io/") for d in record.cdi_devices), record
        env = cdi_env(stack.cdi_dir("xpu-dra"), record)
        assert len(env["ACCELERATOR_UNITS"].split(",")) == 2, env
    assert len(set(devices)) == 4, devices


def test_a_gang_of_mig_partitions_is_placed_on_counters_and_prepared(
    kubeacc_volcano: KubeaccStack, volcano_namespace: str
) -> None:
    stack, ns = kubeacc_volcano, volcano_namespace
    spec = {"devices": {"requests": [_request("mig.kubeacc.io", cel=PROFILE_3G)]}}
    placed: dict[str, list[str]] = {}
    uuids = set()
    # on mig: gpu-server's MIG GPU has a fixed 3g.40gb instance too
    for pod, claim in _run_job(stack, ns, spec, 3, node="mig"):
        assert pod.spec.nodeName == "mig"
        (result,) = _results(claim)
        assert result["pool"] == "mig"
        gpu, _, start = result["device"].rpartition("-mig-3g-40gb-")
        placed.setdefault(gpu, []).append(start)
        (record,) = stack.testbed.node("mig").container_records(namespace=ns, pod=pod.metadata.name)
        env = cdi_env(stack.cdi_dir("mig"), record)
        assert env["KUBEACC_MIG_PROFILE"] == "3g.40gb", env
        assert env["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-"), env
        uuids.add(env["NVIDIA_VISIBLE_DEVICES"])
    # 2 placements of 3g.40gb per GPU (memory slices 0-3 and 4-7): one GPU holds two of the
    # gang, on placements that do not overlap
    assert sorted(len(s) for s in placed.values()) == [1, 2], placed
    assert all(len(set(s)) == len(s) for s in placed.values()), placed
    assert len(uuids) == 3, uuids
    calls = [c["call"] for c in read_calls(stack.nodes["mig"].host / ".synthetic")]
    assert calls.count("nvmlDeviceCreateGpuInstanceWithPlacement") == 3, calls
    assert calls.count("nvmlGpuInstanceCreateComputeInstance") == 3, calls


@pytest.fixture
def bitstream_policy(kubeacc_volcano: KubeaccStack) -> Iterator[str]:
    """An AcceleratorPolicy allowing the N3000's crypto bitstream of the stack's library."""
    client = kubeacc_volcano.client("kubeacc-test")
    name = "volcano-fpga"
    client.create(
        from_dict(
            {
                "apiVersion": API_VERSION,
                "kind": "AcceleratorPolicy",
                "metadata": {"name": name},
                "spec": {
                    "selector": {"types": ["fpga"]},
                    "allowedBitstreams": [{"name": BITSTREAM.name, "sha256": BITSTREAM.sha256}],
                },
            }
        )
    )
    try:
        yield name
    finally:
        client.delete(AcceleratorPolicy, name)


def _card_afu(stack: KubeaccStack, device: str) -> str | None:
    dev = next(d for d in discover(stack.nodes["gpu-server"].host).devices if d.name == device)
    assert dev.fpga
    return dev.fpga.afu_id


def test_an_fpga_with_a_bitstream_is_programmed_at_prepare_under_volcano(
    kubeacc_volcano: KubeaccStack, volcano_namespace: str, bitstream_policy: str
) -> None:
    stack, ns = kubeacc_volcano, volcano_namespace
    config = fpga_claim_config(BITSTREAM.name, f"sha256:{BITSTREAM.sha256}", ("dev",))
    spec = {"devices": {"requests": [_request("fpga.kubeacc.io", cel=N3000)], "config": [config]}}
    ((pod, claim),) = _run_job(stack, ns, spec, 1)
    assert pod.spec.nodeName == "gpu-server"
    (result,) = _results(claim)
    assert result["pool"] == "gpu-server"
    # the agents publish no binding conditions here (the test below): loaded at prepare
    assert not result.get("bindingConditions"), result
    assert _card_afu(stack, result["device"]) == BITSTREAM.afu_id


#: A device of a driver no node runs, on ``mig``, that carries a binding condition.
BOUND_LATER = slice_(
    "mig",
    [
        {
            "name": "dev-0",
            "bindingConditions": ["kubeacc.io/Ready"],
            "bindingFailureConditions": ["kubeacc.io/Failed"],
        }
    ],
    name="volcano-binding-conditions",
    driver="later.kubeacc.io",
)


@pytest.fixture
def later_class(kubeacc_volcano: KubeaccStack) -> Iterator[str]:
    """A DeviceClass of :data:`BOUND_LATER`'s driver, and its slice."""
    client = kubeacc_volcano.client("kubeacc-test")
    client.create(from_dict(BOUND_LATER))
    cls = device_class("later.kubeacc.io", 'device.driver == "later.kubeacc.io"')
    client.create(from_dict(cls))
    try:
        yield "later.kubeacc.io"
    finally:
        client.delete(DeviceClass, "later.kubeacc.io")
        client.delete(ResourceSlice, "volcano-binding-conditions")


def test_volcano_crashes_binding_a_pod_whose_device_has_binding_conditions(
    kubeacc_volcano: KubeaccStack, volcano_namespace: str, later_class: str
) -> None:
    """Why the Volcano stack's agents load bitstreams at prepare: kube-scheduler's DRA PreBind,
    which Volcano's ``predicates`` plugin runs, records an event before it waits for a device's
    binding conditions, and Volcano's framework handle has no event recorder (nil): the
    scheduler process dies. Volcano is started again afterwards for the tests that follow."""
    stack, ns = kubeacc_volcano, volcano_namespace
    volcano = stack.testbed.volcano
    assert volcano is not None and volcano.scheduler is not None
    client = stack.client("kubeacc-test")
    client.create(claim_template("later", ns, {"devices": {"requests": [_request(later_class)]}}))
    claims = [{"name": "dev", "resourceClaimTemplateName": "later"}]
    client.create(vcjob("later", ns, [{"name": "w", "replicas": 1, "pod": pod_spec(claims)}], 1))
    scheduler = volcano.scheduler
    try:
        eventually(lambda: not scheduler.running(), 120, "vc-scheduler to exit")
        log = scheduler.tail(200)
        assert "nil pointer dereference" in log, log
        assert "dynamicresources.(*DynamicResources).PreBind" in log, log
    finally:
        client.delete(VcJob, "later", namespace=ns)
        eventually(lambda: not job_pods(client, ns, "later"), 60, "the Job's pod gone")
        volcano.stop()
        volcano.start()
