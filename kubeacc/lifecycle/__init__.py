"""The node side of the accelerator life cycle: Accelerator status and operations on one node.

``LifecycleAgent`` is what ``kubeacc lifecycle-agent`` runs; the DRA node agent can embed it.
Everything it does to the host goes through the node's :class:`~kubeacc.host.Host` (its kernel:
sysfs writes and the FPGA partial reconfiguration ioctl; its NVML), so a synthetic host exercises
the same code paths as a real node.
"""
