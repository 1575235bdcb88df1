"""kube-scheduler's own CEL for the selectors the engine's evaluator cannot finish.

``cel-expr-python`` stops every evaluation after 10,000 comprehension iterations; kube-scheduler
(cel-go with the Kubernetes libraries) runs a loop as long as its cost stays under the DRA
limit. ``tools/celgo`` builds the scheduler's selector CEL (``k8s.io/dynamic-resource-allocation
/cel`` at the allocator's pinned release, with its compile cache and runtime cost limit) as a C
shared library; this module loads it with ctypes, only when a selector reaches the cap (loading
starts a Go runtime in the process, which ordinary plans never need).

The library is an optional add-on (docs/placement.md, "Long comprehensions", says why and what
it costs): ``$KUBEACC_CELGO_LIBRARY`` names it, else the build's stable path
``$KUBEACC_CACHE/celgo/libkubeacc_cel.so`` (``python -m kubeacc.differential.build celgo``
builds it there). Without it a capped selector is an error that says so; nothing is guessed.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from pathlib import Path
from typing import Any

LIBRARY_ENV = "KUBEACC_CELGO_LIBRARY"
LIBRARY = "libkubeacc_cel.so"
#: the C ABI this module speaks (tools/celgo/main.go ``abi``)
ABI = 1
HOW = (
    "build it with `python -m kubeacc.differential.build celgo` from a source checkout "
    "(Go >= 1.26 and a C compiler) or set $KUBEACC_CELGO_LIBRARY to a built "
    f"{LIBRARY}"
)


class Unavailable(Exception):
    """The library is absent or does not load."""


class GoCelError(Exception):
    """kube-scheduler's CEL refused the expression (``compile``) or failed evaluating it."""

    def __init__(self, message: str, compile_error: bool) -> None:
        super().__init__(message)
        self.compile_error = compile_error


def library_path() -> Path:
    named = os.environ.get(LIBRARY_ENV)
    if named:
        return Path(named)
    cache = Path(os.environ.get("KUBEACC_CACHE", str(Path.home() / ".cache" / "kubeacc")))
    return cache / "celgo" / LIBRARY


_lock = threading.Lock()
_loaded: dict[Path, Any] = {}


def _library() -> Any:
    path = library_path()
    with _lock:
        lib = _loaded.get(path)
        if lib is not None:
            return lib
        if not path.is_file():
            raise Unavailable(f"kube-scheduler's CEL library is not installed at {path}: {HOW}")
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            raise Unavailable(
                f"kube-scheduler's CEL library at {path} does not load: {e}"
            ) from None
        lib.kubeacc_cel_match.restype = ctypes.c_void_p
        lib.kubeacc_cel_match.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        lib.kubeacc_cel_version.restype = ctypes.c_void_p
        lib.kubeacc_cel_version.argtypes = []
        lib.kubeacc_cel_free.restype = None
        lib.kubeacc_cel_free.argtypes = [ctypes.c_void_p]
        found = _answer(lib, lib.kubeacc_cel_version()).get("abi")
        if found != ABI:
            raise Unavailable(f"kube-scheduler's CEL library at {path} has ABI {found}, not {ABI}")
        _loaded[path] = lib
        return lib


def _answer(lib: Any, pointer: int) -> dict[str, Any]:
    try:
        text = ctypes.string_at(pointer)
    finally:
        lib.kubeacc_cel_free(pointer)
    out: dict[str, Any] = json.loads(text)
    return out


def version() -> dict[str, Any]:
    """``{"abi": 1, "kubernetes": "v1.37.2"}`` of the library (raises :class:`Unavailable`)."""
    lib = _library()
    return _answer(lib, lib.kubeacc_cel_version())


def device_json(
    driver: str, attributes: dict[str, tuple[str, Any]], capacity: dict[str, str], multi: bool
) -> str:
    """A device as the library reads it: ``attributes`` name -> (kind, value as written),
    ``capacity`` name -> quantity as written (names as the slice writes them or qualified)."""
    return json.dumps(
        {
            "driver": driver,
            "allowMultipleAllocations": multi,
            "attributes": {k: {kind: v} for k, (kind, v) in attributes.items()},
            "capacity": {k: {"value": v} for k, v in capacity.items()},
        }
    )


def matches(expression: str, device: str) -> bool:
    """Compile (cached in the library) and evaluate ``expression`` on ``device``
    (:func:`device_json`) in kube-scheduler's CEL, under its runtime cost limit."""
    lib = _library()
    out = _answer(lib, lib.kubeacc_cel_match(expression.encode(), device.encode()))
    if "error" in out:
        raise GoCelError(str(out["error"]), bool(out.get("compile")))
    return bool(out["match"])
