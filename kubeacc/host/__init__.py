"""The node as kube-acc reaches it: one :class:`Host` (files, NVML, kernel, driver tools).

See :mod:`kubeacc.host.interface` and docs/architecture.md.
"""

from kubeacc.host.interface import Host, NvmlUnavailable, select_nvml

__all__ = ["Host", "NvmlUnavailable", "select_nvml"]
