"""The nodes of the multi-node testbed: four real kubelets with different hardware shapes.

Each shape names a Node, the synthetic host profile (``kubeacc.synthetic.profiles``) whose
``/sys``, ``/dev`` and ``/proc`` tree that node's agents read, and the labels its kubelet
registers the Node with. The testbed itself starts only kubelets; tests and the demo build the
host trees and run the agents.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubeacc.testbed.kubelet import KubeletOptions

#: Node label naming the node's shape (``gpu-server``, ``fpga``, ``kunlun``, ``edge``).
SHAPE_LABEL = "kubeacc.io/node-shape"
#: Node label naming the synthetic host profile of the node.
PROFILE_LABEL = "kubeacc.io/host-profile"


@dataclass(frozen=True)
class NodeShape:
    name: str
    shape: str
    profile: str
    role: str

    @property
    def labels(self) -> dict[str, str]:
        return {SHAPE_LABEL: self.shape, PROFILE_LABEL: self.profile}

    def kubelet_options(self) -> KubeletOptions:
        return KubeletOptions(node_name=self.name, labels=self.labels)


MULTINODE_SHAPES: tuple[NodeShape, ...] = (
    NodeShape("gpu-server", "gpu-server", "dgx-h100", "8x H100 + 8 NICs with SR-IOV"),
    NodeShape("fpga-node", "fpga", "intel-fpga-dfl", "2 Intel FPGAs (DFL)"),
    NodeShape("kunlun-node", "kunlun", "kunlun-xpu", "Baidu KunLun XPUs"),
    NodeShape("edge-node", "edge", "edge-mixed", "edge: L4 GPU, Xilinx FPGA, NIC"),
)


#: The nodes of the Volcano testbed (``volcano_testbed``): a DRA pool of H100s whose pairs share
#: a PCIe root (3 whole pairs on ``gpu-server``, whose eighth GPU is in MIG mode with fixed
#: instances, 1 more on ``h100-l4``, 4 in all: one 4-pod gang of 2-GPU pods; ``gpu-server`` also
#: holds the two Intel FPGAs that claims program with a bitstream), KunLun XPUs (``xpu-dra``)
#: and two MIG-mode GPUs without instances (``mig``) through DRA, and three device-plugin nodes
#: for per-model resources (two GPU models on ``amd-gpu``, a third on ``l4``, KunLun XPUs on
#: ``kunlun``). Short names: a device plugin's socket path
#: (``<node dir>/kubelet/device-plugins/<resource>.sock``) must stay within 107 bytes.
VOLCANO_SHAPES: tuple[NodeShape, ...] = (
    NodeShape("gpu-server", "gpu-server", "large-mixed", "8x H100 + 2 Intel FPGAs (DFL)"),
    NodeShape("h100-l4", "gpu", "h100-l4", "2 H100 + 1 L4 on one PCIe root"),
    NodeShape("kunlun", "kunlun", "kunlun-xpu", "Baidu KunLun XPUs (device plugin)"),
    NodeShape("amd-gpu", "gpu", "amd-gpu", "4 AMD MI210 + 1 Intel Flex 170"),
    NodeShape("l4", "gpu", "l4-pair", "2 L4 (device plugin)"),
    NodeShape("xpu-dra", "kunlun", "kunlun-xpu", "Baidu KunLun XPUs (DRA)"),
    NodeShape("mig", "gpu", "mig-pair", "H100 + A100 in MIG mode, no instances"),
)


def multinode_options(shapes: tuple[NodeShape, ...] = MULTINODE_SHAPES) -> list[KubeletOptions]:
    """Kubelet options for every shape, in order."""
    return [s.kubelet_options() for s in shapes]
