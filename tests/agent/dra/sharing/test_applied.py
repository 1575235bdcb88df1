"""GPU sharing strategies applied on the device: compute mode and time slice through the
synthetic NVML and nvidia-smi, the MPS control daemon through the synthetic
nvidia-cuda-mps-control, undone with the last claim, refused with a reason, recovered after a
crash (in memory; the testbed run is in test_applied_e2e.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubeacc.agent.dra.checkpoint import read_claims
from kubeacc.agent.dra.devices import device_index
from kubeacc.agent.dra.driver import ClaimRef, Driver
from kubeacc.agent.dra.sharing.applied import STATE_FILE, AppliedSharing, GpuWant
from kubeacc.agent.dra.sharing.limits import CORES, MEMORY
from kubeacc.agent.dra.sharing.mps import MpsDaemons, MpsError
from kubeacc.agent.dra.sharing.timeslice import GpuControl
from kubeacc.crds.opaque import SharingStrategy
from kubeacc.node import cdi
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.tools.hoststate import gpu_state, locked_state, read_calls, read_state
from tests.agent.dra import faultyos
from tests.hosts import discover

NODE = "n1"
GPU0, GPU1 = "gpu-0000-01-00-0", "gpu-0000-02-00-0"
BUS0 = "0000:01:00.0"


class Host:
    def __init__(self, root: Path, state: Path) -> None:
        self.root = root
        self.state = state
        self.cdi = state.parent / "cdi"
        self.index = device_index(discover(root))
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.daemons = MpsDaemons(SyntheticHost(root), state / "mps")

    def gpu(self, n: int) -> dict[str, Any]:
        doc = json.loads((self.root / ".synthetic/nvml.json").read_text())
        return dict(doc["gpus"][n])

    def describe(self, n: int, **fields: Any) -> None:
        """Change GPU ``n`` of the NVML description."""
        path = self.root / ".synthetic/nvml.json"
        doc = json.loads(path.read_text())
        doc["gpus"][n].update(fields)
        path.write_text(json.dumps(doc))

    def driver(self) -> Driver:
        sharing = AppliedSharing(self.state, GpuControl(SyntheticHost(self.root)), self.daemons)
        return Driver(
            NODE,
            self,
            lambda: self.index,
            cdi_dir=self.cdi,
            state_dir=self.state,
            sharing=sharing,
        )

    def get(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        return self.claims.get((namespace, name))

    def claim(
        self,
        name: str,
        uid: str,
        results: list[dict[str, Any]],
        source: str = "FromClass",
        namespace: str = "ns",
        **sharing: str,
    ) -> ClaimRef:
        """A claim whose GpuConfig ``sharing`` comes from its DeviceClass (as the admin sets
        it) or, with ``source="FromClaim"``, from the claim; no ``sharing``: no config."""
        full = [{"request": "gpu", "driver": "kubeacc.io", "pool": NODE, **r} for r in results]
        config = [
            {
                "source": source,
                "requests": [],
                "opaque": {
                    "driver": "kubeacc.io",
                    "parameters": {
                        "apiVersion": "kubeacc.io/v1alpha1",
                        "kind": "GpuConfig",
                        "sharing": sharing,
                    },
                },
            }
        ]
        if not sharing:
            config = []
        self.claims[(namespace, name)] = {
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "status": {"allocation": {"devices": {"results": full, "config": config}}},
        }
        return ClaimRef(namespace, name, uid)

    def calls(self) -> list[tuple[str, str, list[Any], str]]:
        """(tool, call, args, result) of the synthetic host's record, oldest first."""
        return [(c["tool"], c["call"], c["args"], c["result"]) for c in read_calls(self.root)]

    def compute_mode(self, n: int) -> int:
        uuid = self.gpu(n)["uuid"]
        entry = read_state(self.root).get("gpus", {}).get(uuid, {})
        return int(entry.get("computeMode", self.gpu(n).get("computeMode", 0)))


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    root = profiles.build("l4-pair", tmp_path / "host")
    h = Host(root, tmp_path / "state")
    yield h
    for bus_id, pid in h.daemons.running().items():  # never leave a daemon behind
        try:
            h.daemons.stop(bus_id, "")
        except Exception:
            os.kill(pid, signal.SIGKILL)


def share(device: str, share_id: str, memory: str = "4Gi") -> dict[str, Any]:
    return {"device": device, "shareID": share_id, "consumedCapacity": {MEMORY: memory, CORES: "0"}}


def mps_calls(host: Host) -> list[str]:
    return [c[1] for c in host.calls() if c[0] == "mps"]


# -- time-slicing -----------------------------------------------------------------------------
def test_time_slicing_is_applied_and_undone_with_the_last_claim(host: Host) -> None:
    host.describe(0, computeMode=2)  # PROHIBITED before: that is what comes back
    with locked_state(host.root) as state:  # and a medium time slice
        gpu_state(state, host.gpu(0)["uuid"])["timeslice"] = 2
    driver = host.driver()
    a = host.claim("a", "u1", [share(GPU0, "s1")], strategy="TimeSlicing", timeSlice="Short")
    b = host.claim("b", "u2", [share(GPU0, "s2")], strategy="TimeSlicing", timeSlice="Short")
    out = driver.prepare([a, b])
    assert {u: r.error for u, r in out.items()} == {"u1": "", "u2": ""}
    assert host.calls() == [  # applied once, for the first claim
        ("nvml", "nvmlDeviceSetComputeMode", [0], "ok"),
        ("nvidia-smi", "set-timeslice", [1], "ok"),
    ]
    assert host.compute_mode(0) == 0
    state = json.loads((host.state / STATE_FILE).read_text())["gpus"][BUS0]
    assert state["previousComputeMode"] == 2
    assert state["claims"] == ["u1", "u2"]

    assert driver.unprepare([a]) == {"u1": ""}
    assert len(host.calls()) == 2  # u2 still uses the GPU
    assert driver.unprepare([b]) == {"u2": ""}
    assert host.calls()[2:] == [
        ("nvidia-smi", "set-timeslice", [2], "ok"),
        ("nvml", "nvmlDeviceSetComputeMode", [2], "ok"),
    ]
    assert host.compute_mode(0) == 2
    assert json.loads((host.state / STATE_FILE).read_text()) == {"gpus": {}}


def test_a_claim_is_forgotten_only_after_its_gpu_is_put_back(host: Host) -> None:
    """The unprepare order docs/sharing.md promises: while the undo fails the claim stays
    prepared and recorded, unprepare fails with the reason, and each retry tries again."""
    host.describe(0, computeMode=2)
    driver = host.driver()
    a = host.claim("a", "u1", [{"device": GPU0}], strategy="TimeSlicing")
    assert driver.prepare([a])["u1"].error == ""
    assert driver.sharing is not None
    gpu = driver.sharing.control.nvml().gpus[0]  # the running agent's NVML answers change
    gpu["computeModes"] = [0]  # PROHIBITED cannot be set back now
    out = driver.unprepare([a])
    assert out["u1"] == (
        f"unprepare failed: GPU {GPU0}: undoing TimeSlicing (time slice Default) failed: "
        f"GPU {BUS0}: compute mode PROHIBITED: NVML nvmlDeviceSetComputeMode: Not Supported"
    )
    assert set(read_claims(host.state)) == {"u1"}  # still prepared, durably
    assert cdi.spec_uids(host.cdi) == {"u1"}
    assert json.loads((host.state / STATE_FILE).read_text())["gpus"][BUS0]["claims"] == ["u1"]
    assert driver.unprepare([a])["u1"].startswith("unprepare failed: ")  # retried, fails again
    gpu["computeModes"] = [0, 1, 2, 3]
    assert driver.unprepare([a]) == {"u1": ""}
    assert host.compute_mode(0) == 2
    assert read_claims(host.state) == {} and cdi.spec_uids(host.cdi) == set()
    assert json.loads((host.state / STATE_FILE).read_text()) == {"gpus": {}}


def test_a_full_disk_at_unprepare_keeps_the_claim_until_a_retry_can_record_it(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state directory full while the GPU is put back: unprepare fails with the reason,
    the claim stays prepared (spec and checkpoint), and the kubelet's retry finishes it."""
    host.describe(0, computeMode=2)
    driver = host.driver()
    a = host.claim("a", "u1", [{"device": GPU0}], strategy="TimeSlicing")
    assert driver.prepare([a])["u1"].error == ""
    fos = faultyos.install(monkeypatch)
    fos.space = 0
    out = driver.unprepare([a])
    assert out["u1"].startswith("unprepare failed: ") and "No space left" in out["u1"], out
    assert set(read_claims(host.state)) == {"u1"} and cdi.spec_uids(host.cdi) == {"u1"}
    fos.space = None
    assert driver.unprepare([a]) == {"u1": ""}
    assert host.compute_mode(0) == 2
    assert read_claims(host.state) == {} and cdi.spec_uids(host.cdi) == set()
    assert json.loads((host.state / STATE_FILE).read_text()) == {"gpus": {}}


def test_default_time_slice_leaves_the_slice_alone(host: Host) -> None:
    host.describe(0, timeslice=False)  # the GPU cannot change its time slice
    driver = host.driver()
    a = host.claim("a", "u1", [{"device": GPU0}], strategy="TimeSlicing")
    assert driver.prepare([a])["u1"].error == ""
    assert host.calls() == [("nvml", "nvmlDeviceSetComputeMode", [0], "ok")]


def test_a_strategy_the_gpu_cannot_do_fails_the_claim_and_changes_nothing(host: Host) -> None:
    host.describe(0, computeModes=[0])  # no EXCLUSIVE_PROCESS: no MPS
    host.describe(1, timeslice=False)
    driver = host.driver()
    mps = host.claim("m", "u1", [{"device": GPU0}], strategy="MPS")
    short = host.claim("s", "u2", [{"device": GPU1}], strategy="TimeSlicing", timeSlice="Long")
    out = driver.prepare([mps, short])
    assert out["u1"].error == (
        f"ResourceClaim ns/m: GPU {GPU0} cannot do MPS: GPU {BUS0}: compute mode "
        "EXCLUSIVE_PROCESS: NVML nvmlDeviceSetComputeMode: Not Supported"
    )
    assert out["u2"].error.startswith(
        f"ResourceClaim ns/s: GPU {GPU1} cannot do TimeSlicing (time slice Long): "
        "GPU 0000:02:00.0: time slice 3: nvidia-smi compute-policy failed (exit status 3): "
        "Setting the time slice is not supported"
    )
    assert driver.prepared() == {}
    assert cdi.spec_uids(host.cdi) == set()
    assert mps_calls(host) == []  # no daemon for a GPU that refused the mode
    assert host.compute_mode(0) == 0 and host.compute_mode(1) == 0  # GPU1: set and put back
    assert host.calls()[-1] == ("nvml", "nvmlDeviceSetComputeMode", [0], "ok")
    assert json.loads((host.state / STATE_FILE).read_text()) == {"gpus": {}}


def test_claims_asking_different_strategies_of_one_gpu(host: Host) -> None:
    driver = host.driver()
    a = host.claim("a", "u1", [share(GPU0, "s1")], strategy="TimeSlicing", timeSlice="Medium")
    b = host.claim("b", "u2", [share(GPU0, "s2")], strategy="MPS")
    assert driver.prepare([a])["u1"].error == ""
    assert driver.prepare([b])["u2"].error == (
        f"ResourceClaim ns/b: GPU {GPU0} is set up for TimeSlicing (time slice Medium) by "
        "claim(s) u1; this claim asks for MPS"
    )
    assert set(driver.prepared()) == {"u1"}
    assert driver.unprepare([a]) == {"u1": ""}
    assert driver.prepare([b])["u2"].error == ""  # the GPU is free again


def test_an_agent_without_sharing_control_refuses_the_config(host: Host) -> None:
    driver = Driver(NODE, host, lambda: host.index, cdi_dir=host.cdi, state_dir=host.state)
    a = host.claim("a", "u1", [{"device": GPU0}], strategy="MPS")
    assert (
        "this agent does not apply GPU sharing strategies (MPS)" in driver.prepare([a])["u1"].error
    )


# -- MPS --------------------------------------------------------------------------------------
def test_mps_daemon_starts_with_the_first_share_and_stops_with_the_last(host: Host) -> None:
    driver = host.driver()
    a = host.claim("a", "u1", [share(GPU0, "s1", "8Gi")], strategy="MPS")
    b = host.claim("b", "u2", [share(GPU0, "s2", "4Gi")], strategy="MPS")
    assert driver.prepare([a])["u1"].error == ""
    pid = host.daemons.pid(BUS0)
    assert pid is not None
    assert host.compute_mode(0) == 3  # EXCLUSIVE_PROCESS: only the MPS server
    assert driver.prepare([b])["u2"].error == ""
    assert host.daemons.pid(BUS0) == pid
    assert mps_calls(host) == ["start"]
    (start,) = [c for c in read_calls(host.root) if c["tool"] == "mps"]
    assert start["gpu"] == host.gpu(0)["uuid"]  # CUDA_VISIBLE_DEVICES
    assert start["args"] == [str(host.state / "mps" / BUS0 / "pipe"), pid]

    spec = json.loads(cdi.spec_path(host.cdi, "u2").read_text())
    (dev,) = spec["devices"]
    assert dev["containerEdits"]["mounts"] == [
        {
            "hostPath": str(host.state / "mps" / BUS0 / "pipe"),
            "containerPath": "/tmp/nvidia-mps",
            "options": ["rw", "nosuid", "nodev", "bind"],
        }
    ]
    env = dict(e.split("=", 1) for e in dev["containerEdits"]["env"])
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"

    assert driver.unprepare([a]) == {"u1": ""}
    assert host.daemons.pid(BUS0) == pid  # u2 still uses it
    assert driver.unprepare([b]) == {"u2": ""}
    assert host.daemons.pid(BUS0) is None
    assert mps_calls(host) == ["start", "stop"]
    assert host.compute_mode(0) == 0


def test_an_mps_gpu_serves_one_namespace_at_a_time(host: Host) -> None:
    """Issue 43's audit: one MPS control daemon serves every client of a GPU and any of them can
    command it (``quit`` stops MPS under the others), so another namespace's MPS share of a GPU
    in MPS use is refused with the reason; the same namespace's joins; once the GPU is free,
    the other namespace may have it."""
    driver = host.driver()
    a = host.claim("a", "u1", [share(GPU0, "s1")], strategy="MPS")
    b = host.claim("b", "u2", [share(GPU0, "s2")], namespace="other", strategy="MPS")
    c = host.claim("c", "u3", [share(GPU0, "s3")], strategy="MPS")
    assert driver.prepare([a])["u1"].error == ""
    err = driver.prepare([b])["u2"].error
    assert err.startswith("ResourceClaim other/b: GPU ") and "runs MPS for namespace(s) ns" in err
    assert driver.prepare([c])["u3"].error == ""
    assert driver.unprepare([a, c]) == {"u1": "", "u3": ""}
    assert driver.prepare([b])["u2"].error == ""
    assert driver.unprepare([b]) == {"u2": ""}


def test_mps_on_two_gpus_of_one_claim_is_refused(host: Host) -> None:
    driver = host.driver()
    a = host.claim("a", "u1", [{"device": GPU0}, {"device": GPU1}], strategy="MPS")
    assert (
        "MPS on more than one GPU in one claim is not supported" in driver.prepare([a])["u1"].error
    )
    assert host.calls() == []


# -- the strategy belongs to the admin (docs/security.md) -------------------------------------
def test_a_claims_own_strategy_for_a_share_is_refused(host: Host) -> None:
    driver = host.driver()
    plain = host.claim("plain", "u0", [share(GPU0, "s0")])
    assert driver.prepare([plain])["u0"].error == ""
    for n, sharing in enumerate(({"strategy": "MPS"}, {"strategy": "TimeSlicing"})):
        own = host.claim(f"own{n}", f"u{n + 1}", [share(GPU0, f"s{n + 1}")], "FromClaim", **sharing)
        error = driver.prepare([own])[f"u{n + 1}"].error
        assert "its sharing strategy comes from the DeviceClass" in error, error
    assert host.compute_mode(0) == 0 and host.daemons.pid(BUS0) is None
    assert mps_calls(host) == []


def test_a_share_joins_a_gpu_only_on_the_strategy_it_runs(host: Host) -> None:
    driver = host.driver()
    mps = host.claim("mps", "u1", [share(GPU0, "s1")], strategy="MPS")
    assert driver.prepare([mps])["u1"].error == ""
    plain = host.claim("plain", "u2", [share(GPU0, "s2")])
    error = driver.prepare([plain])["u2"].error
    assert f"GPU {GPU0} runs MPS for claim(s) u1; this share runs no strategy" in error, error
    # the other way round: MPS would switch the GPU under strategy-less shares
    plain1 = host.claim("plain1", "u3", [share(GPU1, "s3")])
    assert driver.prepare([plain1])["u3"].error == ""
    mps1 = host.claim("mps1", "u4", [share(GPU1, "s4")], strategy="MPS")
    error = driver.prepare([mps1])["u4"].error
    assert f"GPU {GPU1} is shared by claim(s) u3 with no strategy" in error, error
    assert host.compute_mode(1) == 0 and mps_calls(host) == ["start"]
    driver.unprepare([mps, plain1])


# -- crashes ----------------------------------------------------------------------------------
def test_a_restart_undoes_what_the_checkpoint_does_not_hold(host: Host) -> None:
    """Killed after the GPU was set up but before the checkpoint: the next start undoes it."""
    sharing = AppliedSharing(host.state, GpuControl(SyntheticHost(host.root)), host.daemons)
    sharing.acquire("lost", [GpuWant(GPU0, BUS0, SharingStrategy.MPS)])
    assert host.daemons.pid(BUS0) is not None
    driver = host.driver()  # a new agent: an empty checkpoint
    driver.reconcile()
    assert host.daemons.pid(BUS0) is None
    assert mps_calls(host) == ["start", "stop"]
    assert host.compute_mode(0) == 0
    assert json.loads((host.state / STATE_FILE).read_text()) == {"gpus": {}}


def test_a_restart_keeps_daemons_in_use_and_restarts_dead_ones(host: Host) -> None:
    driver = host.driver()
    a = host.claim("a", "u1", [share(GPU0, "s1")], strategy="MPS")
    assert driver.prepare([a])["u1"].error == ""
    pid = host.daemons.pid(BUS0)
    driver.checkpoint.close()

    again = host.driver()
    again.reconcile()
    assert host.daemons.pid(BUS0) == pid  # kept: the checkpoint holds its claim
    assert mps_calls(host) == ["start"]

    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # the node rebooted, say: the daemon is gone
    again.checkpoint.close()
    third = host.driver()
    third.reconcile()
    assert host.daemons.pid(BUS0) not in (None, pid)
    assert mps_calls(host) == ["start", "start"]
    assert third.unprepare([a]) == {"u1": ""}
    assert host.daemons.pid(BUS0) is None


@pytest.mark.parametrize("strategy", ["MPS", "TimeSlicing"])
def test_a_reboot_gets_the_settings_of_gpus_in_use_back(host: Host, strategy: str) -> None:
    """Issue 46: a node reboot puts compute modes and time slices back to the driver's defaults
    and kills MPS daemons, while the checkpoint keeps the claims prepared: the agent's start
    applies the GPU's settings again (compute mode before the daemon) for the pods the kubelet
    restarts, and still puts back what was found before when the last claim goes."""
    host.describe(0, computeMode=2)
    extra = {"timeSlice": "Long"} if strategy == "TimeSlicing" else {}
    a = host.claim("a", "u1", [share(GPU0, "s1")], strategy=strategy, **extra)
    driver = host.driver()
    assert driver.prepare([a])["u1"].error == ""
    applied = host.compute_mode(0)
    pid = host.daemons.pid(BUS0)
    driver.checkpoint.close()
    # the reboot: the description's defaults, no time slice set, no daemon
    with locked_state(host.root) as state:
        gpu_state(state, host.gpu(0)["uuid"]).clear()
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
    assert host.compute_mode(0) == 2
    before = len(host.calls())
    again = host.driver()
    again.reconcile()
    assert host.compute_mode(0) == applied
    calls = [(c[1], c[2]) for c in host.calls()[before:]]
    if strategy == "TimeSlicing":
        assert ("set-timeslice", [3]) in calls, calls
    else:
        assert calls.index(("nvmlDeviceSetComputeMode", [3])) < calls.index(("start", calls[-1][1]))
        assert host.daemons.pid(BUS0) not in (None, pid)
    assert again.unprepare([a]) == {"u1": ""}
    assert host.compute_mode(0) == 2


def test_a_stray_daemon_nobody_records_is_stopped(host: Host) -> None:
    host.daemons.start("0000:02:00.0", host.gpu(1)["uuid"])
    host.driver().reconcile()
    assert host.daemons.running() == {}
    assert mps_calls(host) == ["start", "stop"]


def test_state_survives_in_the_checkpoint_directory(host: Host) -> None:
    driver = host.driver()
    a = host.claim("a", "u1", [share(GPU0, "s1")], strategy="TimeSlicing", timeSlice="Long")
    assert driver.prepare([a])["u1"].error == ""
    assert set(read_claims(host.state)) == {"u1"}
    driver.checkpoint.close()
    again = host.driver()
    again.reconcile()
    assert len(host.calls()) == 2  # nothing re-applied or undone
    assert again.unprepare([a]) == {"u1": ""}
    assert host.calls()[2:] == [
        ("nvidia-smi", "set-timeslice", [0], "ok"),
        ("nvml", "nvmlDeviceSetComputeMode", [0], "ok"),
    ]


def test_a_host_without_the_mps_tool_fails_the_claim_and_changes_nothing(host: Host) -> None:
    (host.root / "usr/bin/nvidia-cuda-mps-control").unlink()
    driver = host.driver()
    a = host.claim("a", "u1", [share(GPU0, "s1")], strategy="MPS")
    error = driver.prepare([a])["u1"].error
    assert error.endswith(
        f"GPU {GPU0} cannot do MPS: GPU {BUS0}: starting the MPS control daemon: "
        "nvidia-cuda-mps-control not found"
    )
    assert host.compute_mode(0) == 0  # set for MPS, then set back
    assert [c[2] for c in host.calls()] == [[3], [0]]


def test_two_mps_shares_of_one_gpu_in_one_claim(host: Host) -> None:
    driver = host.driver()
    a = host.claim("a", "u1", [share(GPU0, "s1"), share(GPU0, "s2")], strategy="MPS")
    assert driver.prepare([a])["u1"].error == ""
    assert mps_calls(host) == ["start"]
    assert driver.unprepare([a]) == {"u1": ""}
    assert mps_calls(host) == ["start", "stop"]


def test_a_damaged_record_stops_the_agent_with_its_path(host: Host) -> None:
    host.state.mkdir(parents=True)
    (host.state / STATE_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=f"{STATE_FILE}: not JSON"):
        host.driver()


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"gpus": []}, "no 'gpus' object"),
        ({"gpus": {"../x": {}}}, "'../x' is not a PCI bus id"),
        ({"gpus": {"0000:01:00.0": []}}, "GPU 0000:01:00.0: Expected `object`"),
        ({"gpus": {"0000:01:00.0": {"device": "g"}}}, "GPU 0000:01:00.0: Object missing"),
        (
            {
                "gpus": {
                    "0000:01:00.0": {
                        "device": "g",
                        "uuid": "u",
                        "strategy": "MPS",
                        "timeSlice": "Default",
                        "previousComputeMode": "zero",
                        "claims": [],
                    }
                }
            },
            "previousComputeMode",
        ),
    ],
)
def test_a_wrong_shape_record_is_one_error_with_its_path(
    host: Host, record: dict[str, Any], message: str
) -> None:
    host.state.mkdir(parents=True)
    (host.state / STATE_FILE).write_text(json.dumps(record))
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        host.driver()
    assert STATE_FILE in str(err.value) and "\n" not in str(err.value)
    assert not (host.state.parent / "x").exists()  # no MPS directory outside the state dir


def test_no_mps_daemon_for_a_name_that_is_not_a_bus_id(host: Host) -> None:
    with pytest.raises(MpsError, match="not a PCI bus id"):
        host.daemons.start("../x", "GPU-x")
    assert not (host.state / "x").exists() and host.daemons.pid("../x") is None


# -- the pipe directory is the containers' (issue 43) ------------------------------------------
BUS1 = "0000:02:00.0"


def _pid_within(host: Host, bus_id: str, seconds: float = 5.0) -> tuple[bool, int | None]:
    """(answered in time, the answer) of ``daemons.pid``, asked on a thread."""
    answer: list[int | None] = []
    asker = threading.Thread(target=lambda: answer.append(host.daemons.pid(bus_id)), daemon=True)
    asker.start()
    asker.join(seconds)
    return bool(answer), answer[0] if answer else None


def test_the_pid_file_a_container_replaced_is_not_believed_nor_waited_on(host: Host) -> None:
    """The containers of MPS claims mount the pipe directory read-write, the pid file with it:
    a container's root may replace it. A FIFO there never blocks the agent, a link to another
    daemon's pid file is not followed, a file of junk is no pid."""
    other = host.daemons.start(BUS1, host.gpu(1)["uuid"])
    pipe = host.daemons.pipe_dir(BUS0)
    pipe.mkdir(parents=True)
    pid_file = pipe / "nvidia-cuda-mps-control.pid"

    os.mkfifo(pid_file)
    answered, pid = _pid_within(host, BUS0)
    if not answered:  # unblock the agent's read before failing
        os.close(os.open(pid_file, os.O_WRONLY | os.O_NONBLOCK))
    pid_file.unlink()  # (the fixture's clean-up reads it too)
    assert answered and pid is None

    pid_file.symlink_to(host.daemons.pipe_dir(BUS1) / "nvidia-cuda-mps-control.pid")
    assert host.daemons.pid(BUS1) == other
    assert host.daemons.pid(BUS0) is None  # the link is not followed

    pid_file.unlink()
    pid_file.write_bytes(f"{other}".encode() + b" " * 100)  # more than a pid file holds
    assert host.daemons.pid(BUS0) is None
    pid_file.write_text("-1\n")  # kill(-1, 0) would ask about every process
    assert host.daemons.pid(BUS0) is None
    pid_file.unlink()


def test_a_daemon_starts_in_a_pipe_directory_emptied_of_what_containers_left(
    host: Host, tmp_path: Path
) -> None:
    """A container of an earlier claim planted links where the daemon (root) makes its files
    and left a directory and files behind: the next daemon of the GPU starts in an empty
    directory and writes nothing outside it."""
    outside = tmp_path / "host-dir"
    outside.mkdir()
    (outside / "kept").write_text("host file\n")
    pipe = host.daemons.pipe_dir(BUS0)
    pipe.mkdir(parents=True)
    (pipe / "control_lock").symlink_to(outside / "created-by-the-daemon")
    (pipe / "nvidia-cuda-mps-control.pid.tmp").symlink_to(outside / "kept")
    (pipe / "left").mkdir()
    (pipe / "left" / "to-host").symlink_to(outside)
    (pipe / "junk").write_text("x\n")

    pid = host.daemons.start(BUS0, host.gpu(0)["uuid"])
    assert host.daemons.pid(BUS0) == pid
    assert sorted(p.name for p in outside.iterdir()) == ["kept"]
    assert (outside / "kept").read_text() == "host file\n"
    assert not (pipe / "control_lock").is_symlink()
    assert not (pipe / "left").exists() and not (pipe / "junk").exists()
