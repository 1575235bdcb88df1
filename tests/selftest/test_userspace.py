"""``kubeacc selftest`` on a synthetic node: the driver user space and a CDI spec made from it
pass; a library gone from the host and a spec of another driver version fail, by name."""

from __future__ import annotations

import json
from pathlib import Path

from kubeacc.node.userspace.provider import DriverUserSpace
from kubeacc.synthetic.host import SyntheticHost
from tests.cli.clirun import kubeacc
from tests.driverroot import driver_version, stand_in_driver
from tests.hosts import HostFactory


def test_the_report_passes_then_names_what_is_wrong(hosts: HostFactory, tmp_path: Path) -> None:
    host = hosts.copy("dgx-h100")
    version = driver_version(host)
    stand_in_driver(host / "driver", version)
    hook = tmp_path / "kubeacc-cdi-hook"
    hook.write_text("#!/bin/sh\n")
    edits = DriverUserSpace(SyntheticHost(host), "/driver", hook).nvidia_edits()
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    spec = {"cdiVersion": "0.6.0", "kind": "kubeacc.io/claim", "containerEdits": edits}
    (cdi / "kubeacc.io-claim_u1.json").write_text(json.dumps(spec))
    args = ["selftest", "--host-root", str(host), "--driver-root", "/driver", "--cdi-dir", str(cdi)]

    got = kubeacc(*args, home=tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    assert f"PASS  NVIDIA driver user space: driver {version}, 3 libraries" in got.stdout
    assert "PASS  CDI spec kubeacc.io-claim_u1.json: files" in got.stdout
    assert f"spec {version}, loaded module {version}" in got.stdout

    lib = host / f"driver/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.{version}"
    lib.unlink()
    (host / "sys/module/nvidia/version").write_text("999.1.2\n")
    (host / "proc/driver/nvidia/version").unlink()
    got = kubeacc(*args, home=tmp_path)
    assert got.returncode == 1
    out = got.stdout
    assert "FAIL  NVIDIA driver user space: driver root /driver: no libcuda.so.999.1.2" in out
    assert f"missing: {lib}" in out
    assert f"FAIL  CDI spec kubeacc.io-claim_u1.json: driver version: spec {version}, " in out
