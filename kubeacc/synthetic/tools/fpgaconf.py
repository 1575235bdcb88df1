"""A stand-in for OPAE's ``fpgaconf`` on a synthetic host: what the real tool does to a card.

``fpgaconf --bus 0xBB --device 0xDD --function 0xF FILE.gbs`` (the form OpenStack Cyborg's Intel
FPGA driver runs, as root through its privsep daemon) reads the GBS header of ``FILE`` (the
16-byte GBS GUID, a little-endian u32 metadata length, JSON metadata naming the AFU and the FIM,
as :mod:`kubeacc.node.operations.bitstreams` documents it), finds the OPAE card at that PCI
address under ``/sys`` (the synthetic tree mounted there), refuses a bitstream built for another
FIM (the FME's ``pr/interface_id``) as the real tool does, and "partially reconfigures" the
card: its port's ``afu_id`` becomes the AFU the header names. Exit status 0 when programmed, 1
with the reason on stderr otherwise. Each run is appended to the file
``$KUBEACC_FPGACONF_RECORD`` names (one JSON object a line), the tests' record.

Standard library only, run as a script (``python -I -S fpgaconf.py``): it starts in a fraction
of a second on a loaded machine, inside Cyborg's privileged call.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from pathlib import Path

SYS = Path("/sys")
GBS_GUID = b"XeonFPGA\xb7GBSv001"


def _record(entry: dict[str, object]) -> None:
    path = os.environ.get("KUBEACC_FPGACONF_RECORD")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(entry) + "\n")


def _uuid(value: object) -> str:
    text = str(value).replace("-", "").lower()
    if len(text) != 32 or any(c not in "0123456789abcdef" for c in text):
        raise ValueError(f"not a UUID in the GBS metadata: {value!r}")
    return text


def gbs_ids(data: bytes) -> tuple[str, str | None]:
    """The AFU and FIM (interface) IDs of a GBS file; ValueError for anything else."""
    if len(data) < 20 or data[:16] != GBS_GUID:
        raise ValueError("not a GBS file (bad GUID)")
    (length,) = struct.unpack_from("<I", data, 16)
    if 20 + length >= len(data):
        raise ValueError("no bitstream after the GBS metadata")
    try:
        image = json.loads(data[20 : 20 + length])["afu-image"]
        afu = image["accelerator-clusters"][0]["accelerator-type-uuid"]
        iface = image.get("interface-uuid")
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"bad GBS metadata: {exc}") from None
    return _uuid(afu), _uuid(iface) if iface else None


def program(bdf: str, gbs: Path, sys_root: Path = SYS) -> str:
    """Program the card at ``bdf``; the AFU id now loaded. ValueError says why not."""
    dev = sys_root / "bus/pci/devices" / bdf
    fmes = sorted(dev.glob("fpga/intel-fpga-dev.*/intel-fpga-fme.*"))
    ports = sorted(dev.glob("fpga/intel-fpga-dev.*/intel-fpga-port.*"))
    if not fmes or not ports:
        raise ValueError(f"no suitable slots found: no OPAE FPGA at {bdf}")
    afu, iface = gbs_ids(gbs.read_bytes())
    fim = (fmes[0] / "pr/interface_id").read_text().strip()
    if iface and iface != fim:
        raise ValueError(f"bitstream interface id {iface} does not match the FIM {fim} of {bdf}")
    (ports[0] / "afu_id").write_text(afu + "\n")
    return afu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fpgaconf")
    parser.add_argument("-B", "--bus", required=True)
    parser.add_argument("-D", "--device", required=True)
    parser.add_argument("-F", "--function", required=True)
    parser.add_argument("-S", "--segment", default="0x0")
    parser.add_argument("gbs", type=Path)
    args = parser.parse_args(argv)
    try:
        seg, bus, dev, fn = (
            int(v, 16) for v in (args.segment, args.bus, args.device, args.function)
        )
    except ValueError as exc:
        print(f"fpgaconf: {exc}", file=sys.stderr)
        return 1
    bdf = f"{seg:04x}:{bus:02x}:{dev:02x}.{fn:x}"
    try:
        afu = program(bdf, args.gbs)
    except (OSError, ValueError) as exc:
        _record({"bdf": bdf, "ok": False, "error": str(exc)})
        print(f"fpgaconf: {exc}", file=sys.stderr)
        return 1
    _record({"bdf": bdf, "ok": True, "afu": afu})
    print(f"fpgaconf: {bdf} programmed, AFU {afu}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
