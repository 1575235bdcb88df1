"""Whole devices (GPUs, NICs and their VFs, XPUs, FPGAs as plain devices): what the core gives
every device (its published nodes, its configs' environment) and, for NVIDIA GPUs, their UUIDs
and the driver's user space (:mod:`.kind`)."""
