"""``python -m kubeacc.testbed up`` stops on Ctrl-C (SIGINT) even when it was started with SIGINT
ignored, as a non-interactive shell starts a background job (``cmd &``): Python leaves an
inherited ignore in place, so ``up`` sets its own handler."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

UP = "-m kubeacc.testbed up --no-kubelet"


def test_up_started_with_sigint_ignored_still_stops_on_ctrl_c(tmp_path: Path) -> None:
    log = tmp_path / "up.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            # as a background job of a non-interactive shell: SIGINT ignored, then exec
            ["bash", "-c", f"trap '' INT; exec {sys.executable} {UP}"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 180)
        kubeconfig = Path(proc.stdout.readline().strip()) if ready else None
        assert kubeconfig is not None and kubeconfig.exists(), log.read_text()[-3000:]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
        assert not kubeconfig.exists(), "Ctrl-C should remove the work directory"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
