"""FPGAs as DRA devices: bitstreams loaded before binding (:mod:`.binding`, :mod:`.conditions`)
or at prepare, and the device kind the driver calls (:mod:`.kind`)."""
