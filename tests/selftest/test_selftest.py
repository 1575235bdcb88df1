"""``kubeacc selftest`` on synthetic nodes: every check passing on a node that is as kube-acc
expects it, and each check failing, by name and with its reason, when one thing is wrong."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kubeacc.node.userspace.provider import DriverUserSpace
from kubeacc.selftest import prepare, smoke
from kubeacc.selftest import report as selftest_report
from kubeacc.synthetic.host import SyntheticHost
from tests.cli.clirun import kubeacc
from tests.driverroot import LIB_DIR, driver_version, stand_in_driver
from tests.hosts import HostFactory

#: The MIG-mode GPU of dgx-h100, which has one instance in use.
MIG_GPU = 7


def nvml_doc(host: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((host / ".synthetic/nvml.json").read_text())
    return doc


def write_nvml(host: Path, doc: dict[str, Any]) -> None:
    (host / ".synthetic/nvml.json").write_text(json.dumps(doc))


@pytest.fixture
def node(hosts: HostFactory, tmp_path: Path) -> Path:
    """An 8-GPU node with its driver user space under /driver, a CDI spec made from it, and
    its MIG GPU's instance gone (the GPU free for the MIG round trip)."""
    host = hosts.copy("dgx-h100")
    stand_in_driver(host / "driver", driver_version(host))
    doc = nvml_doc(host)
    doc["gpus"][MIG_GPU]["migDevices"] = []
    write_nvml(host, doc)
    hook = tmp_path / "kubeacc-cdi-hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    edits = DriverUserSpace(SyntheticHost(host), "/driver", hook).nvidia_edits()
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    spec = {"cdiVersion": "0.6.0", "kind": "kubeacc.io/claim", "containerEdits": edits}
    (cdi / "kubeacc.io-claim_u1.json").write_text(json.dumps(spec))
    return host


def selftest(host: Path, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    got = kubeacc(
        "selftest",
        "--host-root",
        str(host),
        "--driver-root",
        "/driver",
        "--cdi-dir",
        str(tmp_path / "cdi"),
        "--cdi-hook",
        str(tmp_path / "kubeacc-cdi-hook"),
        "-o",
        "json",
        *extra,
        home=tmp_path,
    )
    assert got.returncode in (0, 1), got.stderr
    return got.returncode, json.loads(got.stdout)


def by_name(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["name"]: (c["status"], c["detail"]) for c in report["checks"]}


def test_every_check_passes_on_a_node_as_expected(node: Path, tmp_path: Path) -> None:
    rc, report = selftest(node, tmp_path, "--mig", "--mps", "--timeslice")
    checks = by_name(report)
    version = driver_version(node)
    assert report["node"]["host"] == "dgx-h100-01"
    assert report["node"]["driver"] == version
    assert report["node"]["kernel"] == (node / "proc/sys/kernel/osrelease").read_text().strip()
    failed = {n: c for n, c in checks.items() if c[0] != "pass"}
    # The containers need a runtime (tests/selftest/test_smoke_runtime.py).
    containers = {"CUDA smoke in a container", prepare.WHOLE, prepare.SHARE}
    assert set(failed) == containers, failed
    assert {failed[name][0] for name in containers} == {"skip"}
    assert rc == 0
    assert checks["NVML: GPU count"][1] == "discovery 8, NVML 8"
    assert checks["NVML: driver version"][1] == f"kernel module {version}, NVML {version}"
    assert len([n for n in checks if n.endswith(": UUID")]) == 8
    assert checks["GPU 0000:1b:00.0: memory"][1] == "published 81559 MiB, NVML 81559 MiB"
    assert checks["CDI spec kubeacc.io-claim_u1.json: files"][0] == "pass"
    mig = checks["MIG create/destroy"][1]
    assert mig.startswith("GPU 0000:bf:00.0: 1g.10gb at slice 0 created (MIG-"), mig
    assert "0 -> 1 -> 0" in checks["time slice set/restore"][1]
    assert "started and stopped" in checks["MPS daemon start/stop"][1]
    assert report["summary"] == {"pass": len(checks) - 3, "fail": 0, "skip": 3}


def test_nvml_disagreeing_with_discovery_fails_by_gpu(node: Path, tmp_path: Path) -> None:
    doc = nvml_doc(node)
    doc["gpus"][1]["uuid"] = "GPU-00000000-0000-0000-0000-000000000000"
    del doc["gpus"][0]
    write_nvml(node, doc)
    rc, report = selftest(node, tmp_path)
    checks = by_name(report)
    assert rc == 1
    assert checks["NVML: GPU count"] == ("fail", "discovery 8, NVML 7")
    assert checks["NVML: bus ids"] == ("fail", "only discovery: 0000:1b:00.0")
    assert checks["GPU 0000:1d:00.0: UUID"][0] == "fail"
    assert "NVML GPU-00000000-0000-0000-0000-000000000000" in checks["GPU 0000:1d:00.0: UUID"][1]
    assert checks["GPU 0000:3f:00.0: UUID"][0] == "pass"


def test_a_wrong_driver_version_and_a_missing_library_fail(node: Path, tmp_path: Path) -> None:
    version = driver_version(node)
    doc = nvml_doc(node)
    doc["driverVersion"] = "535.104.05"
    write_nvml(node, doc)
    lib = node / "driver" / LIB_DIR / f"libnvidia-ptxjitcompiler.so.{version}"
    lib.unlink()
    rc, report = selftest(node, tmp_path)
    checks = by_name(report)
    assert rc == 1
    assert checks["NVML: driver version"] == (
        "fail",
        f"kernel module {version}, NVML 535.104.05",
    )
    assert checks["CDI spec kubeacc.io-claim_u1.json: files"] == ("fail", f"missing: {lib}")

    (node / "driver" / LIB_DIR / f"libcuda.so.{version}").unlink()
    rc, report = selftest(node, tmp_path)
    status, detail = by_name(report)["NVIDIA driver user space"]
    assert rc == 1 and status == "fail"
    assert detail.startswith(f"driver root /driver: no libcuda.so.{version} or libnvidia-ml")


def test_a_busy_mig_gpu_is_refused_with_its_instances(hosts: HostFactory, tmp_path: Path) -> None:
    host = hosts.copy("dgx-h100")
    (tmp_path / "cdi").mkdir()
    rc, report = selftest(host, tmp_path, "--mig")
    status, detail = by_name(report)["MIG create/destroy"]
    assert rc == 1 and status == "fail"
    assert detail.startswith("refused: every MIG GPU has instances in use (GPU 0000:bf:00.0")
    assert nvml_doc(host)["gpus"][MIG_GPU]["migDevices"]  # untouched


def test_checks_that_change_a_gpu_run_only_when_asked(node: Path, tmp_path: Path) -> None:
    rc, report = selftest(node, tmp_path)
    checks = by_name(report)
    assert rc == 0
    for name, flag in (
        ("MIG create/destroy", "--mig"),
        ("MPS daemon start/stop", "--mps"),
        ("time slice set/restore", "--timeslice"),
    ):
        assert checks[name][0] == "skip" and flag in checks[name][1]


def test_a_smoke_run_without_a_runtime_fails_with_the_path(node: Path, tmp_path: Path) -> None:
    rc, report = selftest(
        node, tmp_path, "--smoke-image", "debian:stable", "--ctr", str(tmp_path / "no-ctr")
    )
    assert rc == 1
    why = ("fail", f"--ctr {tmp_path / 'no-ctr'} is not an executable file")
    checks = by_name(report)
    for name in ("CUDA smoke in a container", prepare.WHOLE, prepare.SHARE):
        assert checks[name] == why


def test_a_smoke_env_that_is_not_name_value_is_refused(node: Path, tmp_path: Path) -> None:
    for bad in ("NOEQUALS", "=x", "1X=y", "A-B=c"):
        got = kubeacc("selftest", "--host-root", str(node), "--smoke-env", bad, home=tmp_path)
        assert got.returncode == 2, got.stdout
        assert "not NAME=VALUE" in got.stderr and repr(bad) in got.stderr


def test_a_node_without_nvidia_gpus_skips_the_nvidia_checks(
    hosts: HostFactory, tmp_path: Path
) -> None:
    host = hosts.copy("amd-gpu")
    (tmp_path / "cdi").mkdir()
    rc, report = selftest(host, tmp_path, "--mig", "--mps", "--timeslice")
    assert rc == 0
    assert {c["status"] for c in report["checks"]} == {"skip"}, report
    assert report["node"]["driver"] == "none loaded"


def test_a_containers_output_cannot_drive_the_terminal_or_forge_a_line() -> None:
    """Issue 43: a detail may quote the smoke image's output; the text report escapes it."""
    shown = "exit 1: \x1b[2J\x1b[HPASS  all\nok"
    report = selftest_report.Report({"host": "n1"}, [selftest_report.failed("CUDA smoke", shown)])
    lines = report.text().splitlines()
    assert lines[2] == "FAIL  CUDA smoke: exit 1: \\x1b[2J\\x1b[HPASS  all\\nok"
    assert len(lines) == 4 and "\x1b" not in report.text()


def test_a_containers_output_is_kept_bounded_and_never_fails_to_decode(tmp_path: Path) -> None:
    """Issue 43: what a smoke container prints is the image's. 3 MiB on stdout keep 1 MiB;
    bytes that are not UTF-8 on stderr are replaced; a run past the timeout is killed."""
    fake = tmp_path / "ctr"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$3" = sleep ]; then exec sleep 30; fi\n'
        "head -c 3145728 /dev/zero | tr '\\0' x\n"
        "printf 'bad \\377\\376 bytes\\r\\n' >&2\n"
    )
    fake.chmod(0o755)
    rt = smoke.Runtime(fake, tmp_path / "sock", "img", tmp_path / "prog", timeout=2)
    done = smoke.ctr(rt, "run")
    assert done.returncode == 0
    assert len(done.stdout) == smoke.OUTPUT_MAX and set(done.stdout) == {"x"}
    assert done.stderr == "bad \ufffd\ufffd bytes\n"
    with pytest.raises(subprocess.TimeoutExpired):
        smoke.ctr(rt, "sleep")
    assert smoke.ctr(rt, "sleep", check_timeout=False).returncode == -1
