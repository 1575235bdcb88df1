"""One device-selector evaluation in the engine's evaluator and in kube-scheduler's own CEL
library (tools/celgo, :mod:`kubeacc.engine.celgo`); prints JSON.

For each selector: microseconds per evaluation on one device in ``cel-expr-python`` as the
engine runs it (:class:`kubeacc.engine.celenv.DeviceEnv`, compiled once, the device's
activation reused) and in the library through ctypes (compiled once in its cache; each call
passes the device as JSON, which the library decodes, and returns a JSON answer: what the
engine would pay per evaluation if it used the library for every selector), and their ratio.
``true`` shows the library's fixed cost per call. ``capped`` selectors pass the evaluator's
10,000-iteration cap: the engine's time is its run to the cap plus the library's.
Also: the library's size on disk, and its build time when the build recorded one.

Run: ``python bench/celgo.py [--rounds N]`` (builds the library first if needed, ~2 min cold).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import Any

from cel_eval import _time  # the same per-call timing as the evaluator's benchmark

from kubeacc.differential.build import ensure_celgo
from kubeacc.engine import celgo
from kubeacc.engine.celenv import CelError, DeviceEnv, compile_selector, qvalue
from kubeacc.engine.pools import go_device
from kubeacc.engine.quantity import parse_quantity

D = "kubeacc.io"
A = f'device.attributes["{D}"]'
SELECTORS = {
    "true": "true",
    "attribute": f'{A}.model == "h100"',
    "two_attributes": f'{A}.model != "a100" && {A}.numa == 1',
    "macro": f'["a100", "h100"].exists(m, m == {A}.model)',
    "quantity": f'device.capacity["{D}"].memory.compareTo(quantity("40Gi")) >= 0',
    "loop_2000": "lists.range(2000).all(i, i >= 0)",
}
CAPPED = {
    "capped_20000": "lists.range(20000).all(i, i >= 0)",
    "capped_nested_300": "lists.range(300).all(i, lists.range(300).all(j, i + j >= 0))",
}
RAW: dict[str, Any] = {
    "name": "gpu-0",
    "attributes": {"model": {"string": "h100"}, "numa": {"int": 1}, "index": {"int": 3}},
    "capacity": {"memory": {"value": "80Gi"}},
}


def _env() -> DeviceEnv:
    variable = {
        "driver": D,
        "attributes": {D: {"model": "h100", "numa": 1, "index": 3}},
        "capacity": {D: {"memory": qvalue(parse_quantity("80Gi"))}},
        "allowMultipleAllocations": False,
    }
    return DeviceEnv(variable, lambda: go_device(D, RAW, False))


def _python(env: DeviceEnv, expr: str) -> Callable[[], Any]:
    selector = compile_selector(expr)
    return lambda: env.matches(selector)


def measure(rounds: int) -> dict[str, Any]:
    path = ensure_celgo()
    os.environ[celgo.LIBRARY_ENV] = str(path)
    env = _env()
    device = go_device(D, RAW, False)
    out: dict[str, Any] = {}
    for name, expr in {**SELECTORS, **CAPPED}.items():
        n = rounds if name in SELECTORS and "loop" not in name else max(3, rounds // 1000)
        go = _time(lambda e=expr: celgo.matches(e, device), n)
        try:
            py: float | None = _time(_python(env, expr), n)
        except CelError:
            py = None
        out[name] = {
            "expression": expr,
            "rounds": n,
            "python_us": None if py is None else round(py * 1e6, 2),
            "library_us": round(go * 1e6, 2),
            "library_over_python": None if py is None else round(go / py, 2),
        }
    seconds = path.parent / "build-seconds"
    return {
        "library": str(path),
        "library_bytes": path.stat().st_size,
        "library_version": celgo.version(),
        "build_seconds": float(seconds.read_text()) if seconds.is_file() else None,
        "load_average": os.getloadavg()[0],
        "selectors": out,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20000)
    args = ap.parse_args()
    print(json.dumps(measure(args.rounds), indent=2))


if __name__ == "__main__":
    main()
