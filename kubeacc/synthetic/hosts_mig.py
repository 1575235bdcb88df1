"""``mig-pair``: a node whose two 80 GB GPUs (one H100, one A100) are in MIG mode, empty.

The dynamic-MIG tests' host: no GPU instance exists at boot, so every partition the agent
publishes is free, and what the synthetic NVML's call log records is the agent's doing.
"""

from __future__ import annotations

from kubeacc.synthetic import board
from kubeacc.synthetic.board import bdf
from kubeacc.synthetic.hosts_gpu import DRIVER_VERSION, H100_SXM, NVIDIA, NvidiaModel, nvidia_gpu
from kubeacc.synthetic.pci import GEN4_X16
from kubeacc.synthetic.tree import HostBuilder

A100_SXM_80GB = NvidiaModel(
    0x20B2, (NVIDIA, 0x1463), "NVIDIA A100-SXM4-80GB", 85899345920, (8, 0), 400000, GEN4_X16
)


def mig_pair(b: HostBuilder) -> None:
    """An H100 80GB and an A100 80GB, both in MIG mode without instances; onboard NIC."""
    b.numa(["0-15"], [[10]])
    b.identity("mig-01", "AMD EPYC 7443 24-Core Processor")
    b.nvidia_version(DRIVER_VERSION)
    board.host_bridge(b, numa=0)
    board.onboard_nic(b, bdf(0, 0x1C, 4), 0x05, "eno1", root_port=board.INTEL_ROOT_PORT)
    root = b.root_complex(0, 0x00)
    gpus = []
    for n, (dev, model) in enumerate(((0x01, H100_SXM), (0x03, A100_SXM_80GB))):
        port = b.bridge(root, bdf(0, dev), *board.INTEL_ROOT_PORT, link=GEN4_X16)
        gpu = nvidia_gpu(b, port, bdf(0x01 + n), model, index=n, numa=0)
        gpu.mig_mode = 1
        gpus.append(gpu)
    b.nvml(gpus)
    b.pci_ids()
