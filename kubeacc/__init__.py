"""kube-acc: one accelerator management system for Kubernetes."""

__version__ = "0.1.0"
