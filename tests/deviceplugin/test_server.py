"""One resource's device-plugin socket, called through grpcio the way the kubelet calls it."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from kubeacc.deviceplugin.server import RegistrationError, ResourceServer, ResourceState
from kubeacc.model import Device, DeviceType
from kubeacc.node.kubeletapi import deviceplugin_v1beta1_pb2 as pb
from tests.hosts import HostFactory, discover
from tests.kubeletclient import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from tests.kubeletclient.refusal import refusal


@pytest.fixture
def gpus(hosts: HostFactory) -> dict[str, Device]:
    inv = discover(hosts.pristine("dgx-h100"), nvml="off")
    return {d.pci_bus_id: d for d in inv.by_type(DeviceType.GPU) if d.pci_bus_id}


@pytest.fixture
def served(gpus: dict[str, Device]) -> Iterator[ResourceServer]:
    with tempfile.TemporaryDirectory(prefix="dp-", dir="/tmp") as d:  # sun_path <= 107 bytes
        server = ResourceServer(
            "kubeacc.io/gpu", Path(d), ResourceState(gpus, {}, 1, "spread"), None
        )
        server.start()
        try:
            yield server
        finally:
            server.stop()


def test_list_and_watch_streams_changes_and_ends_on_stop(
    served: ResourceServer, gpus: dict[str, Device]
) -> None:
    with grpc.insecure_channel(f"unix://{served.socket}") as ch:
        stream = pb_grpc.DevicePluginStub(ch).ListAndWatch(pb.Empty(), timeout=10)
        first = next(stream)
        assert sorted(d.ID for d in first.devices) == sorted(gpus)
        assert {d.health for d in first.devices} == {"Healthy"}
        keep = dict(sorted(gpus.items())[:3])
        served.update(ResourceState(keep, {}, 2, "spread"))  # three GPUs, shared twice
        second = next(stream)
        assert sorted(d.ID for d in second.devices) == sorted(
            f"{bdf}::{r}" for bdf in keep for r in (0, 1)
        )
        served.stop()
        assert list(stream) == []
    assert not served.serving()
    assert not served.socket.exists()


def test_allocate_answers_and_refuses_unknown_devices(
    served: ResourceServer, gpus: dict[str, Device]
) -> None:
    first = sorted(gpus)[0]
    with grpc.insecure_channel(f"unix://{served.socket}") as ch:
        stub = pb_grpc.DevicePluginStub(ch)
        assert stub.GetDevicePluginOptions(pb.Empty(), timeout=5).get_preferred_allocation_available
        resp = stub.Allocate(
            pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=[first])]
            ),
            timeout=5,
        )
        assert resp.container_responses[0].envs["ACCELERATOR_UNITS"] == first
        # The default device root is the host's own /: host path = container path.
        specs = resp.container_responses[0].devices
        assert specs and all(s.host_path == s.container_path for s in specs)
        with pytest.raises(grpc.RpcError) as err:
            stub.Allocate(
                pb.AllocateRequest(
                    container_requests=[pb.ContainerAllocateRequest(devices_ids=["0000:ff:00.0"])]
                ),
                timeout=5,
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "kubeacc.io/gpu: container request 0" in (err.value.details() or "")
        assert stub.PreStartContainer(pb.PreStartContainerRequest(), timeout=5) is not None


def test_registration_without_a_kubelet_fails_with_a_clear_error(served: ResourceServer) -> None:
    with pytest.raises(RegistrationError, match=r"kubeacc\.io/gpu"):
        served.register(served.plugin_dir / "kubelet.sock", timeout=2)


def test_allocate_of_ten_thousand_unknown_ids_is_a_short_invalid_argument(
    served: ResourceServer,
) -> None:
    ids = [f"0001:{i // 256:02x}:{i % 256:02x}.{i % 8}" for i in range(10_000)]
    with grpc.insecure_channel(f"unix://{served.socket}") as ch:
        stub = pb_grpc.DevicePluginStub(ch)
        err = refusal(
            stub.Allocate,
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)]),
        )
    details = err.details() or ""
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (err.code(), details[:200])
    assert len(details) < 500
    assert details.endswith("unknown device(s): " + ", ".join(ids[:5]) + " (and 9995 more)")


def test_preferred_allocation_with_an_unknown_id_is_invalid_argument(
    served: ResourceServer, gpus: dict[str, Device]
) -> None:
    known = sorted(gpus)[:2]
    with grpc.insecure_channel(f"unix://{served.socket}") as ch:
        stub = pb_grpc.DevicePluginStub(ch)
        for available, must in (([*known, "0000:ff:00.0"], []), (known, ["gpu-\x00" + "x" * 300])):
            request = pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=2
            )
            err = refusal(
                stub.GetPreferredAllocation,
                pb.PreferredAllocationRequest(container_requests=[request]),
            )
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "container request 0: unknown device(s): " in (err.details() or "")
        # The same call with known IDs only is answered.
        ok = stub.GetPreferredAllocation(
            pb.PreferredAllocationRequest(
                container_requests=[
                    pb.ContainerPreferredAllocationRequest(
                        available_deviceIDs=known, allocation_size=1
                    )
                ]
            ),
            timeout=10,
        )
        assert len(ok.container_responses[0].deviceIDs) == 1


def test_allocate_hands_out_device_nodes_under_the_device_root(
    gpus: dict[str, Device], tmp_path: Path
) -> None:
    devroot = tmp_path / "devices"
    with tempfile.TemporaryDirectory(prefix="dp-", dir="/tmp") as d:
        server = ResourceServer(
            "kubeacc.io/gpu",
            Path(d),
            ResourceState(gpus, {}, 1, "spread"),
            None,
            device_root=devroot,
        )
        server.start()
        try:
            with grpc.insecure_channel(f"unix://{server.socket}") as ch:
                resp = pb_grpc.DevicePluginStub(ch).Allocate(
                    pb.AllocateRequest(
                        container_requests=[
                            pb.ContainerAllocateRequest(devices_ids=[sorted(gpus)[0]])
                        ]
                    ),
                    timeout=5,
                )
        finally:
            server.stop()
        specs = resp.container_responses[0].devices
        assert "/dev/nvidiactl" in {s.container_path for s in specs}
        for s in specs:
            assert s.host_path == str(devroot / s.container_path.lstrip("/"))
