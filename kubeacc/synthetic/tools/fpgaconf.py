"""A stand-in for OPAE's ``fpgaconf`` on a synthetic host: what the real tool does to a card.

``fpgaconf --bus 0xBB --device 0xDD --function 0xF FILE.gbs`` (the form OpenStack Cyborg's Intel
FPGA driver runs, as root through its privsep daemon) reads the GBS header of ``FILE``, finds the
OPAE card at that PCI address under ``/sys`` (the synthetic tree mounted there), refuses a
bitstream built for another FIM (the FME's ``pr/interface_id``) as the real tool does, and
"partially reconfigures" the card: its port's ``afu_id`` becomes the AFU the header names.
Exit status 0 when programmed, 1 with the reason on stderr otherwise. Each run is appended to
the file ``$KUBEACC_FPGACONF_RECORD`` names (one JSON object a line), the tests' record.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from kubeacc.host.kernel import HostError
from kubeacc.node.operations.bitstreams import parse_gbs

SYS = Path("/sys")


def _record(entry: dict[str, object]) -> None:
    path = os.environ.get("KUBEACC_FPGACONF_RECORD")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(entry) + "\n")


def program(bdf: str, gbs: Path, sys_root: Path = SYS) -> str:
    """Program the card at ``bdf``; the AFU id now loaded. ValueError says why not."""
    dev = sys_root / "bus/pci/devices" / bdf
    fmes = sorted(dev.glob("fpga/intel-fpga-dev.*/intel-fpga-fme.*"))
    ports = sorted(dev.glob("fpga/intel-fpga-dev.*/intel-fpga-port.*"))
    if not fmes or not ports:
        raise ValueError(f"no suitable slots found: no OPAE FPGA at {bdf}")
    data = gbs.read_bytes()
    try:
        image = parse_gbs(gbs.name, "", data)
    except HostError as exc:
        raise ValueError(exc.message) from None
    fim = (fmes[0] / "pr/interface_id").read_text().strip()
    if image.interface_id and image.interface_id != fim:
        raise ValueError(
            f"bitstream interface id {image.interface_id} does not match the FIM {fim} of {bdf}"
        )
    (ports[0] / "afu_id").write_text(image.afu_id + "\n")
    return image.afu_id


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
