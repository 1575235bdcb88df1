"""Named synthetic hosts.

``build(name, dest)`` writes one under ``dest`` and returns ``dest``. Output is deterministic:
every identifier derives from ``seed`` (default: the profile name).

========================  ================================================================
profile                   contents
========================  ================================================================
``dgx-h100``              8 H100 SXM (NVLink, GPU 7 in MIG mode), 8 ConnectX-7 IB with 8 VFs
                          each (64 VFs), 4 NVSwitch functions, BMC VGA, 2 NVMe, tg3 NIC; 2 NUMA
``large-mixed``           ``dgx-h100`` plus 2 Intel DFL FPGA cards (the discovery benchmark)
``intel-fpga-dfl``        2 Intel FPGA cards, in-tree DFL driver, one with an AFU loaded
``intel-fpga-opae``       the same two cards, OPAE driver layout
``aws-f1``                VM with 2 AWS F1-like FPGA slots (app + mgmt PF), ENA NIC, EBS NVMe
``kunlun-xpu``            8 KunLun XPUs behind 2 switches, 1 ConnectX-6 Dx (RoCE); 2 NUMA
``amd-gpu``               4 AMD Instinct MI210 + 1 Intel Data Center GPU Flex 170; 2 NUMA
``edge-mixed``            1 L4, 1 E810 with 4 VFs, 1 Alveo U250, 1 unknown accelerator; 1 NUMA
``l4-pair``               2 L4 (24 GB) and an onboard NIC; 1 NUMA (GPU memory sharing tests)
``h100-l4``               2 H100 SXM + 1 L4 and an onboard NIC; 1 NUMA (units, preferences)
``mig-pair``              1 H100 80GB + 1 A100 80GB, both in MIG mode without instances (MIG)
========================  ================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kubeacc.synthetic.hosts_fpga import aws_f1, intel_fpga_dfl, intel_fpga_opae
from kubeacc.synthetic.hosts_gpu import (
    amd_gpu,
    dgx_h100,
    edge_mixed,
    h100_l4,
    l4_pair,
    large_mixed,
)
from kubeacc.synthetic.hosts_mig import mig_pair
from kubeacc.synthetic.hosts_xpu import kunlun_xpu
from kubeacc.synthetic.tree import HostBuilder

Profile = Callable[[HostBuilder], None]

PROFILES: dict[str, Profile] = {
    "dgx-h100": dgx_h100,
    "large-mixed": large_mixed,
    "intel-fpga-dfl": intel_fpga_dfl,
    "intel-fpga-opae": intel_fpga_opae,
    "aws-f1": aws_f1,
    "kunlun-xpu": kunlun_xpu,
    "amd-gpu": amd_gpu,
    "edge-mixed": edge_mixed,
    "l4-pair": l4_pair,
    "h100-l4": h100_l4,
    "mig-pair": mig_pair,
}

NAMES: tuple[str, ...] = tuple(PROFILES)

#: Hosts without an IOMMU (VMs): no ``iommu_group`` links.
_NO_IOMMU = frozenset({"aws-f1"})


def build(name: str, dest: Path | str, *, seed: str | None = None) -> Path:
    """Write profile ``name`` under ``dest`` (created if needed) and return ``dest``."""
    try:
        profile = PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; known: {', '.join(NAMES)}") from None
    root = Path(dest)
    builder = HostBuilder(root, seed=seed or name, iommu=name not in _NO_IOMMU)
    profile(builder)
    builder.mark(name)
    return root


def describe(name: str) -> str:
    """The profile's one-line description."""
    doc = PROFILES[name].__doc__ or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""
