"""Operations on one device through the node's host: reset, power, attach/detach, FPGA
programming, MIG mode."""
