from __future__ import annotations

from kubeacc.model import DeviceType
from kubeacc.topology.distance import Tier, distance, tier
from tests.hosts import HostFactory, discover


def test_tiers_order_devices_on_the_8_gpu_server(hosts: HostFactory) -> None:
    inv = discover(hosts.pristine("dgx-h100"))
    numa = {n.id: n.distances for n in inv.numa_nodes}
    gpus = inv.by_type(DeviceType.GPU)
    nics = inv.by_type(DeviceType.NIC)
    gpu = gpus[0]
    same_switch = next(n for n in nics if n.pcie_root == gpu.pcie_root)
    same_numa = next(
        n for n in nics if n.numa_node == gpu.numa_node and n.pcie_root != gpu.pcie_root
    )
    far = next(n for n in nics if n.numa_node != gpu.numa_node)
    assert tier(gpu, gpu) is Tier.SAME
    assert tier(gpu, gpus[1]) is Tier.LINKED
    assert tier(gpu, same_switch) is Tier.SAME_SWITCH
    assert tier(gpu, same_numa) is Tier.SAME_NUMA
    assert tier(gpu, far) is Tier.CROSS_NUMA
    ordered = [distance(gpu, x, numa) for x in (gpu, gpus[1], same_switch, same_numa, far)]
    assert ordered == sorted(ordered) and len(set(ordered)) == 5
    assert distance(gpu, far, numa) == distance(far, gpu, numa) > int(Tier.CROSS_NUMA)


def test_without_nvlink_gpus_fall_back_to_pcie_tiers(hosts: HostFactory) -> None:
    inv = discover(hosts.pristine("dgx-h100"), nvml="off")
    gpus = inv.by_type(DeviceType.GPU)
    peers = [g for g in gpus[1:] if g.pcie_root == gpus[0].pcie_root]
    assert peers and tier(gpus[0], peers[0]) is Tier.SAME_SWITCH
    cross = [g for g in gpus if g.numa_node != gpus[0].numa_node]
    assert tier(gpus[0], cross[0]) is Tier.CROSS_NUMA
