"""A pass the machine failed (no descriptors left, the deadline) is an error in strict mode,
never a host with fewer devices."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kubeacc.host.files import HostReadError, HostRoot
from tests.hosts import HostFactory, discover

#: Discovery with every descriptor but a few taken: what strict and lenient passes answer.
_STARVED = textwrap.dedent(
    """
    import json, os, resource, sys
    from kubeacc.discovery import discover
    from kubeacc.host.files import HostReadError
    from kubeacc.synthetic.host import SyntheticHost
    host = SyntheticHost(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    held = []
    try:
        while True:
            held.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        pass
    lenient = discover(host, nvml="off")
    try:
        discover(host, nvml="off", strict=True)
        strict = "no error"
    except HostReadError as err:
        strict = str(err)
    for fd in held:
        os.close(fd)
    print(json.dumps({"lenient": len(lenient.devices), "strict": strict}))
    """
)


def test_out_of_descriptors_is_an_error_not_an_empty_host(hosts: HostFactory) -> None:
    root = hosts.pristine("dgx-h100")
    assert len(discover(root, nvml="off", strict=True).devices) == 16
    done = subprocess.run(
        [sys.executable, "-c", _STARVED, str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = json.loads(done.stdout)
    assert out["lenient"] < 16  # what the agent used to publish: fewer (or no) devices
    assert "Too many open files" in out["strict"] and "failed" in out["strict"]


def test_a_pass_over_its_deadline_is_an_error_in_strict_mode(hosts: HostFactory) -> None:
    with pytest.raises(HostReadError, match="deadline"):
        discover(hosts.pristine("dgx-h100"), deadline=0.0, strict=True)


def test_machine_errors_are_failures_and_missing_files_are_not(tmp_path: Path) -> None:
    host = HostRoot(tmp_path)
    assert host.read_text("/nothing-here") is None
    assert host.sink.failures == []
    host.sink.oserror("/x", "cannot read", OSError(errno.EIO, "Input/output error"))
    assert host.sink.failures == ["/x: cannot read: Input/output error"]
