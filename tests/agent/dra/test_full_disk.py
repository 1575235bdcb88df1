"""The agent with its state or CDI directory on a small tmpfs, full or read-only, in a private
mount namespace (``unshare -m``, as root): at start-up one line and exit status 1; at run time a
per-claim error, nothing acknowledged that is not on disk whole, and recovery once space returns.
The agent's files are read from outside through ``/proc/<pid>/root``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest
from lightkube import Client

from kubeacc.agent.dra.checkpoint import read_claims
from kubeacc.node import cdi
from tests.kubeletclient import dra_v1_pb2_grpc as v1_grpc

from . import crashstream
from .agentproc import AgentProcess
from .crashstream import call, socket_path

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None,
        reason="needs root and unshare(1) for a private tmpfs mount",
    ),
]


def in_tmpfs(mounts: dict[Path, str], fill: tuple[Path, ...] = ()) -> list[str]:
    """A command prefix: private mount namespace, a tmpfs with ``options`` on each path, the
    ``fill`` ones filled up, then exec of the rest of the command line."""
    script = ["set -e"]
    for path, options in mounts.items():
        script.append(f"mkdir -p '{path}' && mount -t tmpfs -o '{options}' tmpfs '{path}'")
    for path in fill:
        script.append(f"dd if=/dev/zero of='{path}/fill' bs=4k 2>/dev/null || true")
    script.append('exec "$@"')
    return ["unshare", "-m", "sh", "-c", "\n".join(script), "sh"]


@pytest.mark.parametrize(
    ("which", "options", "fill", "reason"),
    [
        ("state", "size=64k", True, "No space left on device"),
        ("state", "ro", False, "Read-only file system"),
        ("cdi", "size=64k", True, "No space left on device"),
        ("cdi", "ro", False, "Read-only file system"),
    ],
)
def test_start_on_a_full_or_read_only_directory_fails_with_one_line(
    lone_agent: AgentProcess, which: str, options: str, fill: bool, reason: str
) -> None:
    path = lone_agent.state_dir if which == "state" else lone_agent.cdi_dir
    lone_agent.start(wrapper=in_tmpfs({path: options}, (path,) if fill else ()))
    assert lone_agent.proc is not None
    assert lone_agent.proc.wait(120) == 1
    out = lone_agent.log().splitlines()
    assert "Traceback" not in lone_agent.log()
    errors = [line for line in out if line.startswith("error:")]
    what = "state directory" if which == "state" else "CDI directory"
    assert errors == [f"error: {what} {path} is not writable: {reason}"]
    assert out[-1] == errors[0]


@pytest.mark.parametrize("metadata", [True, False], ids=["metadata", "no-metadata"])
def test_full_directories_at_run_time_fail_per_claim_and_recover(
    kube_client: Client, namespace: str, lone_agent: AgentProcess, metadata: bool
) -> None:
    agent = lone_agent
    refs = [
        (
            namespace,
            f"c{i}",
            crashstream.create_allocated_claim(
                kube_client, namespace, f"c{i}", agent.node, crashstream.GPUS[i]
            ),
        )
        for i in range(3)
    ]
    uids = [u for _, _, u in refs]
    # a snapshot after every call leaves the journal empty: its next line needs a fresh page
    agent.start(
        extra=["--compact-after=1", *([] if metadata else ["--no-device-metadata"])],
        wrapper=in_tmpfs({agent.state_dir: "size=256k", agent.cdi_dir: "size=256k"}),
    )
    crashstream.wait_serving(agent)
    assert agent.proc is not None
    root = Path(f"/proc/{agent.proc.pid}/root")  # the agent's view of its tmpfs mounts
    state, cdi_dir = root / agent.state_dir.relative_to("/"), root / agent.cdi_dir.relative_to("/")

    def fill(d: Path) -> None:
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={d / 'fill'}", "bs=4k"], check=False, capture_output=True
        )

    def on_disk() -> tuple[set[str], set[str]]:
        recorded = read_claims(state)
        for uid in cdi.spec_uids(cdi_dir):  # every spec complete, equal to its record
            assert (
                json.loads(cdi.spec_path(cdi_dir, uid).read_bytes()) == (recorded[uid]["cdi_spec"])
            )
        assert not cdi.leftovers(cdi_dir)
        return set(recorded), cdi.spec_uids(cdi_dir)

    with grpc.insecure_channel(f"unix://{socket_path(agent)}") as ch:
        stub = v1_grpc.DRAPluginStub(ch)
        assert call(stub, "prepare", [refs[0]]) == {uids[0]: ""}

        fill(cdi_dir)  # CDI directory full: the spec cannot be written
        out = call(stub, "prepare", [refs[1]])
        assert out[uids[1]] == "writing the CDI spec failed: No space left on device"
        assert on_disk() == ({uids[0]}, {uids[0]})

        (cdi_dir / "fill").unlink()
        fill(state)  # state directory full: the claims' device metadata files (written first)
        out = call(stub, "prepare", [refs[1], refs[2]])  # or else the checkpoint cannot be
        failed = "writing the device metadata failed" if metadata else "checkpoint write failed"
        assert out == dict.fromkeys(uids[1:], f"{failed}: No space left on device")
        out = call(stub, "unprepare", [refs[0]])
        assert out == {uids[0]: "unprepare failed: No space left on device"}
        assert on_disk() == ({uids[0]}, {uids[0]})  # still prepared, whole: retryable

        (state / "fill").unlink()  # space returns: the same calls now work
        assert call(stub, "prepare", [refs[1], refs[2]]) == dict.fromkeys(uids[1:], "")
        assert call(stub, "unprepare", [refs[0]]) == {uids[0]: ""}
        assert on_disk() == (set(uids[1:]), set(uids[1:]))
    assert agent.proc.poll() is None
    assert "Traceback" not in agent.log()
