"""The node side of the accelerator life cycle: Accelerator status and operations on one node.

``LifecycleAgent`` is what ``kubeacc lifecycle-agent`` runs; the DRA node agent can embed it.
Everything it does to the host goes through ``HostKernel`` (sysfs writes and the FPGA partial
reconfiguration ioctl), so a synthetic host root plus ``kubeacc.synthetic.kernel`` exercises the
same code paths as a real node.
"""
