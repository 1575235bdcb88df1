"""The docs' shell blocks marked ``run`` (tests/docs/blocks.py), run as written on one testbed.

The module's fixture runs the docs' own ``fixture`` block, ``python -m kubeacc.testbed up
--with-kubeacc`` (docs/install.md, "Try it on one machine"), once, as an admin would: the
cluster with kube-acc installed by its chart on a containerd node. Each ``run`` block is then a
test of its own, in the order of the docs (README.md, docs/*.md, examples/): bash ``-e -o
pipefail`` after sourcing the ``env.sh`` that ``up`` printed, in a scratch directory that links
the repository's top-level entries (so ``charts/kubeacc`` and ``examples/`` resolve; files a
command writes stay out of the checkout, and ``deploy/``, which one rewrites, is a copy). The
blocks share the cluster in that order: docs/cli.md's ``plan`` runs before examples/ leave
claims pending. A block passes when it exits 0; some blocks' promises
are checked beyond that (``CHECKS``). Stopping ``up`` with Ctrl-C (SIGINT) is checked too: it
exits 0 and removes its work directory, as it says.
"""

from __future__ import annotations

import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.core_v1 import Pod

from kubeacc.crds.resources import AcceleratorOperation, as_dict
from tests.docs.blocks import ROOT, Block, all_blocks
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster

BLOCKS = all_blocks()
RUN = [b for b in BLOCKS if b.kind == "run"]
UP_TIMEOUT_S = 900
#: Copied rather than linked: blocks write there (docs/lifecycle.md regenerates deploy/crds).
COPIED = {"deploy"}


@dataclass
class Journey:
    proc: subprocess.Popen[str]
    log: Path
    env_sh: Path
    kubeconfig: Path
    scratch: Path
    #: time.time() when the fixture began (before the copy of deploy/, which keeps its times)
    started: float

    def client(self) -> Client:
        return Client(KubeConfig.from_file(self.kubeconfig))


def _read_line(proc: subprocess.Popen[str], timeout: float, log: Path) -> str:
    """The first line ``up`` prints on stdout (the kubeconfig), or a failure with its log."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline().strip() if ready else ""
    if not line:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        raise AssertionError(f"up --with-kubeacc printed no kubeconfig:\n{log.read_text()[-4000:]}")
    return line


@pytest.fixture(scope="module")
def journey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Journey]:
    (fixture,) = [b for b in BLOCKS if b.kind == "fixture"]
    argv = shlex.split(fixture.script())
    assert argv[0] == "python", argv
    tmp = tmp_path_factory.mktemp("docs")
    log = tmp / "up.log"
    started = time.time()
    t0 = time.monotonic()
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, *argv[1:]], cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True
        )
    try:
        kubeconfig = Path(_read_line(proc, UP_TIMEOUT_S, log))
        printed = log.read_text()
        print(f"up --with-kubeacc ready after {time.monotonic() - t0:.1f}s")
        for what in ("kube-acc:", "host:", "values:", "shell:", "stop:"):
            assert re.search(rf"^{what}", printed, re.MULTILINE), (what, printed[-3000:])
        found = re.search(r"^shell:\s+\. (\S+)", printed, re.MULTILINE)
        assert found is not None
        scratch = tmp / "cwd"
        scratch.mkdir()
        for entry in ROOT.iterdir():
            if entry.name in COPIED:
                shutil.copytree(entry, scratch / entry.name, symlinks=True)
            elif entry.name != ".git":
                (scratch / entry.name).symlink_to(entry)
        yield Journey(proc, log, Path(found.group(1)), kubeconfig, scratch, started)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(120)
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert not kubeconfig.exists(), "Ctrl-C should remove the work directory"


def _phases(client: Client, ns: str) -> dict[str, str]:
    return {
        p.metadata.name: p.status.phase
        for p in client.list(Pod, namespace=ns)
        if p.metadata and p.metadata.name and p.status and p.status.phase
    }


def _examples(j: Journey) -> None:
    """examples/README.md on the dgx-h100 host: as its text says for a cluster of that shape."""
    client = j.client()
    ops = {
        o["metadata"]["name"]: o.get("status") or {}
        for o in map(as_dict, client.list(AcceleratorOperation, namespace="ml-team"))
    }
    assert ops["reset-gpu"].get("phase") == "Succeeded", ops["reset-gpu"]
    for name in ("program-gzip", "drain-xpu"):
        reasons = [c.get("reason") for c in ops[name].get("conditions") or []]
        assert ops[name].get("phase") == "Failed" and "NoTargetMatched" in reasons, ops[name]
    runs = ["any-gpu", "h100", "gpu-nic-same-root", "sriov-vf"]
    eventually(
        lambda: all(_phases(client, "ml-team").get(p) == "Running" for p in runs),
        180,
        f"{runs} Running",
    )


def _crds(j: Journey) -> None:
    """docs/lifecycle.md: deploy/crds regenerated, and what is committed."""
    written = sorted((j.scratch / "deploy" / "crds").iterdir())
    assert written
    for path in written:
        # written by the block just now (the copy keeps the checkout's times), and unchanged
        assert path.stat().st_mtime >= j.started, path.name
        assert path.read_text() == (ROOT / "deploy" / "crds" / path.name).read_text(), path.name


#: What a block promises beyond exiting 0, by the file it is in.
CHECKS: dict[str, Callable[[Journey], None]] = {
    "examples/README.md": _examples,
    "docs/lifecycle.md": _crds,
}


@pytest.mark.parametrize("block", RUN, ids=[b.where for b in RUN])
def test_block_runs_as_written(block: Block, journey: Journey) -> None:
    script = f". {shlex.quote(str(journey.env_sh))}\n{block.script()}"
    t0 = time.monotonic()
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=journey.scratch,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
    )
    print(f"{block.where}: exit {done.returncode} in {time.monotonic() - t0:.1f}s")
    assert done.returncode == 0, f"{block.where}:\n{block.text}\n{done.stdout}\n{done.stderr}"
    check = CHECKS.get(block.path.relative_to(ROOT).as_posix())
    if check is not None:
        check(journey)
