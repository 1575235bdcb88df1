"""What FPGA programming through Cyborg adds to the Cyborg lane, and what one program costs.

Prints one JSON object: the start of the lane's cloud without and with Glance and the PAC host
(kubeacc.testbed.cyborgcloud, ``glance`` and ``fpga_hosts``), the memory of Glance's process and
of the PAC host's Cyborg agent, then ``--runs`` programs of the synthetic PAC card through the
life-cycle agent's Cyborg side (kubeacc.lifecycle.cyborgops): the first with the bitstream's
upload to Glance, the others finding it there. Each program is split into the time until
Cyborg's program API answered (upload, download by Cyborg's agent, ``fpgaconf`` through privsep)
and the wait until Cyborg reports the new AFU (its agent reports once a minute, so that part is
mostly where in the minute the program fell).

    python bench/cyborg_program.py [--runs 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from kubeacc.lifecycle.cyborgops import CyborgOperations
from kubeacc.node.cyborg.client import Credentials, CyborgClient
from kubeacc.node.cyborg.glance import GlanceImages
from kubeacc.node.cyborg.inventory import CyborgInventory
from kubeacc.node.operations.bitstreams import BitstreamLibrary, make_gbs
from kubeacc.testbed.cyborgcloud import CyborgCloud
from kubeacc.testbed.procs import free_port, rss_bytes

HOST = "bench-pac"


def _start(work: Path, *, fpga: bool) -> tuple[CyborgCloud, float]:
    cloud = CyborgCloud(
        work,
        work / "logs",
        (HOST,),
        f"http://127.0.0.1:{free_port()}",
        glance=fpga,
        fpga_hosts=(HOST,) if fpga else (),
    )
    start = time.monotonic()
    cloud.start()
    return cloud, time.monotonic() - start


def _programs(cloud: CyborgCloud, library: Path, runs: int) -> list[dict[str, Any]]:
    creds = Credentials(
        cyborg_url=cloud.cyborg_url,
        placement_url=cloud.placement_url,
        glance_url=cloud.glance_url,
        token="admin",
        project_id="6f7a1c2e9b5d4e3fa0b1c2d3e4f5a6b7",
        user_id="0a1b2c3d4e5f40718293a4b5c6d7e8f9",
    )
    client = CyborgClient(creds)
    ops = CyborgOperations(
        client,
        CyborgInventory(client, HOST, None, every_unit=True),
        BitstreamLibrary(library),
        lambda: GlanceImages(creds),
        afu_report_s=150,
        poll_s=0.2,
    )
    (dev,) = ops.discover().values()
    card = cloud.fpga[HOST]
    out = []
    for n in range(runs):
        # alternate two AFUs, so that every program changes the card
        afu = f"{n % 2 + 1:x}" * 32
        name = f"afu{n % 2}.gbs"
        (library / name).write_bytes(make_gbs(afu, card.interface_id(), bytes(64 * 1024)))
        digest = hashlib.sha256((library / name).read_bytes()).hexdigest()
        start = time.monotonic()
        original = client.program
        answered: list[float] = []

        def timed(
            deployable: str, image: str, original: Any = original, answered: Any = answered
        ) -> None:
            original(deployable, image)
            answered.append(time.monotonic())

        client.program = timed  # type: ignore[method-assign]
        result = ops.program(dev, name, digest, {digest})
        client.program = original  # type: ignore[method-assign]
        end = time.monotonic()
        out.append(
            {
                "ok": result.ok,
                "uploaded": "uploaded to" in result.message,
                "program_api_s": round(answered[0] - start, 2) if answered else None,
                "afu_report_wait_s": round(end - answered[0], 2) if answered else None,
                "card_afu_matches": card.afu_id() == afu,
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kubeacc-cyborg-prog-") as tmp:
        cloud, plain = _start(Path(tmp) / "plain", fpga=False)
        cloud.stop()
        cloud, with_fpga = _start(Path(tmp) / "fpga", fpga=True)
        try:
            report["start_without_glance_and_pac_s"] = round(plain, 1)
            report["start_with_glance_and_pac_s"] = round(with_fpga, 1)
            report["rss_mib"] = {
                name: round(rss_bytes(cloud.procs[name].pid) / 2**20)
                for name in ("glance", f"cyborg-agent-{HOST}")
                if cloud.procs[name].pid
            }
            library = Path(tmp) / "bitstreams"
            library.mkdir()
            report["programs"] = _programs(cloud, library, args.runs)
        finally:
            start = time.monotonic()
            cloud.stop()
            report["stop_s"] = round(time.monotonic() - start, 1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
