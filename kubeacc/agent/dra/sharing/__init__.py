"""Shares of one device: memory shares and their limits (:mod:`.limits`), GPU sharing strategies
applied on the GPU (:mod:`.applied`, :mod:`.strategy`, :mod:`.timeslice`, :mod:`.mps`), the
sharing policies' slices (:mod:`.policyshare`), and the device kind the driver calls
(:mod:`.kind`)."""
