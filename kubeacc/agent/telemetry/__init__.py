"""Device telemetry on the agent's metrics endpoint (docs/install.md, "Device telemetry").

A background sampler (:mod:`.sampler`) reads every device's own figures on an interval --
NVIDIA GPUs through NVML (:mod:`.nvidia`), the others from their sysfs files (:mod:`.sysfs`) --
and a Prometheus collector (:mod:`.collector`) serves the last sample, each series labelled
with the node, the device, its model and who holds it (:mod:`.holders`). Nothing is read at
scrape time, so a scraper cannot make the agent read the hardware more often than the
interval says.
"""
