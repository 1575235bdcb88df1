"""Normalized capacity across accelerator generations (``kubeacc.io/gpu-units``) and model
preferences ("H100, else A100, else KunLun R200")."""
