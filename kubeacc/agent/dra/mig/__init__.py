"""MIG partitions as DRA devices: the placements NVML offers (:mod:`.model`, :mod:`.nvml`), their
publication (:mod:`.publish`), the instances made at prepare (:mod:`.prepare`), made again after a
reboot (:mod:`.restore`), and the device kind the driver calls (:mod:`.kind`)."""
