"""A node-local FPGA bitstream library for the synthetic Intel FPGA hosts.

The files are Intel GBS images (``kubeacc.node.operations.bitstreams.make_gbs``) built for the
FIM interfaces of the synthetic cards, with fixed contents, so their SHA-256 digests are
constants: the demo, the ``examples/`` manifests and the tests name them by digest.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from kubeacc.node.operations.bitstreams import make_gbs
from kubeacc.synthetic.hosts_fpga import PAC_ARRIA10, PAC_N3000


@dataclass(frozen=True)
class SyntheticBitstream:
    #: Path inside the library.
    name: str
    afu_id: str
    interface_id: str
    payload: bytes

    def image(self) -> bytes:
        return make_gbs(self.afu_id, self.interface_id, self.payload, name=self.name)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.image()).hexdigest()


#: The library: a crypto offload for each card's FIM (the Arria 10 one is what the demo and the
#: examples program), and a compression function for the N3000.
BITSTREAMS: tuple[SyntheticBitstream, ...] = (
    SyntheticBitstream(
        "crypto-offload-v3.gbs",
        "c0ffee00c0de4a5a8b1c2d3e4f506172",
        PAC_ARRIA10.compat_id,
        b"crypto-offload-v3 partial bitstream\n" * 64,
    ),
    SyntheticBitstream(
        "n3000/crypto-offload-v3.gbs",
        "c0ffee00c0de4a5a8b1c2d3e4f506172",
        PAC_N3000.compat_id,
        b"crypto-offload-v3 partial bitstream (N3000)\n" * 64,
    ),
    SyntheticBitstream(
        "n3000/gzip-v1.gbs",
        "9a7e5d3c1b0f4e2d8c6b4a2918273645",
        PAC_N3000.compat_id,
        b"gzip-v1 partial bitstream\n" * 64,
    ),
)


def bitstream(name: str) -> SyntheticBitstream:
    for b in BITSTREAMS:
        if b.name == name:
            return b
    raise KeyError(f"no synthetic bitstream {name!r}")


def write_library(directory: Path) -> dict[str, str]:
    """Write every bitstream under ``directory``; return ``{name: sha256}``."""
    out = {}
    for b in BITSTREAMS:
        path = directory / b.name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = b.image()
        path.write_bytes(data)
        out[b.name] = hashlib.sha256(data).hexdigest()
    return out
