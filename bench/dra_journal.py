"""The DRA checkpoint journal's cost per call, without gRPC or the API server around it.

Prints one JSON object: the median microseconds of one ``record_prepare`` + ``record_unprepare``
pair of a one-device claim (halved: per call), per round, on a tmpfs (``/dev/shm``: the
encoding and hashing alone) and on ``--disk`` (with its ``fsync``). ``--compare FILE`` also runs
another version of ``kubeacc/agent/dra/checkpoint.py`` (for example ``git show
REV:kubeacc/agent/dra/checkpoint.py > old.py``) in alternation with this one, same claim.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from kubeacc.agent.dra import checkpoint as current
from kubeacc.node import cdi


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("compared_checkpoint", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def per_call_us(module: ModuleType, base: Path, calls: int) -> float:
    """Median microseconds per journal record (prepare and unprepare alternating)."""
    spec = cdi.build_spec("u1", "ns/c1", [cdi.CDIDevice("gpu-0000-1b-00-0", "0000:1b:00.0")])
    device = module.PreparedDevice(["gpu"], "node", "gpu-0000-1b-00-0", ["kubeacc.io/claim=x"])
    claims = {"u1": module.PreparedClaim("ns", "c1", [device], spec)}
    times = []
    with tempfile.TemporaryDirectory(dir=base) as state:
        cp = module.Checkpoint(Path(state), compact_after=10**9)
        cp.load()
        for _ in range(calls):
            start = time.perf_counter()
            cp.record_prepare(claims)
            cp.record_unprepare(["u1"])
            times.append((time.perf_counter() - start) * 1e6 / 2)
        cp.close()
    return round(statistics.median(times), 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--disk", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--compare", type=Path, help="another checkpoint.py to run beside")
    args = parser.parse_args()
    versions = {"current": current}
    if args.compare is not None:
        versions["compared"] = _load(args.compare)
    result: dict[str, object] = {
        "benchmark": "dra_journal",
        "load_1min": round(os.getloadavg()[0], 2),
    }
    for where, base in (("tmpfs", Path("/dev/shm")), ("disk", args.disk)):
        for _ in range(args.rounds):  # the versions in alternation
            for name, module in versions.items():
                runs = result.setdefault(f"{name}_{where}_us", [])
                assert isinstance(runs, list)
                runs.append(per_call_us(module, base, args.calls))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
