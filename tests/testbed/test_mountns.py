"""A node's mount namespace (kubeacc/testbed/mountns.py): private to the machine's mounts, but
receiving what is mounted later under a directory the machine shared before it was made (a
fault run's agent state on the lazy file system, which the node's containerd must read)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kubeacc.testbed.mountns import MountNamespace, shared


def _inside(ns: MountNamespace, path: Path) -> str:
    done = subprocess.run(
        [*ns.enter(), "cat", str(path)], capture_output=True, text=True, check=False, timeout=30
    )
    return done.stdout if done.returncode == 0 else f"<{done.stderr.strip()}>"


def _tmpfs(where: Path, text: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(where)], check=True, timeout=30)
    (where / "f").write_text(text)


def test_a_mount_under_a_shared_directory_shows_in_the_node_and_others_do_not(
    tmp_path: Path,
) -> None:
    ns = MountNamespace(tmp_path / "ns" / "mnt", {})
    plain = tmp_path / "plain" / "m"
    with shared(tmp_path / "work") as work:
        ns.ensure()
        try:
            # mounted on the machine after the namespace was made
            _tmpfs(work / "state", "shared")
            _tmpfs(plain, "private")
            try:
                assert _inside(ns, work / "state" / "f") == "shared"
                assert _inside(ns, plain / "f").startswith("<")  # the mount point's empty dir
                # mounted inside the node: not on the machine
                subprocess.run(
                    [*ns.enter(), "mount", "-t", "tmpfs", "tmpfs", str(tmp_path / "ns")],
                    check=True,
                    timeout=30,
                )
                assert not [p for p in (tmp_path / "ns").iterdir() if p.name != "mnt"]
                # unmounted on the machine: gone inside too
                subprocess.run(["umount", str(work / "state")], check=True, timeout=30)
                assert _inside(ns, work / "state" / "f").startswith("<")
            finally:
                subprocess.run(["umount", "-l", str(plain)], check=False, timeout=30)
        finally:
            ns.delete()
    assert not (work / "state" / "f").exists()
