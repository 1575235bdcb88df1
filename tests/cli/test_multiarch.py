"""``{multiarch}`` in the agent's library paths: the machine's own Debian multiarch directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubeacc.cli.multiarch import MultiarchError, expand


def test_the_placeholder_becomes_the_machines_directory() -> None:
    path = Path("/run/kubeacc/nvidia/{multiarch}/libnvidia-ml.so.1")
    assert expand(path, "x86_64") == Path("/run/kubeacc/nvidia/x86_64-linux-gnu/libnvidia-ml.so.1")
    assert expand(path, "aarch64") == Path(
        "/run/kubeacc/nvidia/aarch64-linux-gnu/libnvidia-ml.so.1"
    )
    assert expand(Path("/usr/lib64/libnvidia-ml.so.1"), "s390x") == Path(
        "/usr/lib64/libnvidia-ml.so.1"
    )  # no placeholder: any machine
    assert expand(None) is None


def test_an_unknown_machine_is_refused_by_name() -> None:
    with pytest.raises(MultiarchError, match="no multiarch library directory for machine 's390x'"):
        expand(Path("/x/{multiarch}"), "s390x")
