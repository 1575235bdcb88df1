"""The composition root's host choice: ``--host`` auto/real/synthetic and ``--simulate-kernel``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kubeacc.cli.errors import CommandExit
from kubeacc.cli.hosts import HostKind, open_host
from kubeacc.host.real import RealHost
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.kernel import SyntheticKernel
from tests.hosts import HostFactory


def test_auto_recognises_a_synthetic_tree_and_a_plain_one(
    hosts: HostFactory, tmp_path: Path
) -> None:
    assert isinstance(open_host(hosts.pristine("l4-pair")), SyntheticHost)
    assert isinstance(open_host(tmp_path), RealHost)


def test_an_explicit_choice_wins_over_the_tree(hosts: HostFactory, tmp_path: Path) -> None:
    assert isinstance(open_host(hosts.pristine("l4-pair"), HostKind.REAL), RealHost)
    assert isinstance(open_host(tmp_path, HostKind.SYNTHETIC), SyntheticHost)


def test_simulate_kernel_gives_the_synthetic_host_its_kernel(hosts: HostFactory) -> None:
    host = open_host(hosts.copy("l4-pair"), simulate_kernel=True)
    assert isinstance(host.kernel, SyntheticKernel)


def test_simulate_kernel_on_a_real_host_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(CommandExit) as err:
        open_host(tmp_path, simulate_kernel=True)
    assert err.value.code == 2


def test_a_real_host_is_opened_without_the_synthetic_host(tmp_path: Path) -> None:
    """A node asks for the marker only: the synthetic host and its NVML stand-in stay out."""
    code = (
        "import sys; from pathlib import Path; from kubeacc.cli.hosts import open_host; "
        f"h = open_host(Path({str(tmp_path)!r})); "
        "print(type(h).__name__, "
        "sorted(m for m in sys.modules if m.startswith('kubeacc.synthetic')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split(maxsplit=1) == [
        "RealHost",
        "['kubeacc.synthetic', 'kubeacc.synthetic.marker']\n",
    ]
