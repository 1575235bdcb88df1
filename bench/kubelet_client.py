"""The grpcio stubs the tests use to play the kubelet (tests/kubeletclient), for benchmarks.

The benchmarks call the agent through a gRPC implementation other than the agent's own, as the
kubelet does; the stubs live with the tests, so the repository root goes on the path.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType


def stubs(module: str) -> ModuleType:
    """``tests.kubeletclient.<module>``, e.g. ``dra_v1_pb2_grpc``."""
    return tests_module(f"kubeletclient.{module}")


def tests_module(module: str) -> ModuleType:
    """``tests.<module>``, e.g. ``agent.dra.crashstream`` (the crash harness)."""
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(f"tests.{module}")
