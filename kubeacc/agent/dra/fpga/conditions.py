"""The names the FPGA binding conditions share with the DRA driver (kubeacc.agent.dra.fpga.binding).

A module of their own so that the driver, which every agent loads before it registers, checks
a claim's binding condition without loading the binder (only a node with a bitstream library
runs it).
"""

from __future__ import annotations

#: True once the claim's bitstream is loaded (or the claim asks for none).
PROGRAMMED = "kubeacc.io/BitstreamProgrammed"
#: True when the bitstream cannot be loaded: the scheduler gives the device back.
FAILED = "kubeacc.io/BitstreamFailed"


class NotProgrammed(Exception):
    """The device does not carry the claim's bitstream (yet)."""
