"""Run the real ``kubeacc`` console script as a user would, in a clean environment."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

KUBEACC = str(Path(sys.executable).parent / "kubeacc")


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without cluster configuration; ``HOME`` is ``home``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
        and not k.startswith(("TTY_", "FORCE_COLOR"))
    }
    env.update({"HOME": str(home), "COLUMNS": "200", **extra})
    return env


def kubeacc(
    *args: str, home: Path, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KUBEACC, *args],
        env=clean_env(home, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def assert_one_line_error(
    result: subprocess.CompletedProcess[str], code: int, *needles: str
) -> str:
    """The command failed with ``code`` and said why in exactly one line on stderr."""
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def ended(proc: subprocess.Popen[bytes], seconds: float, *, dump: bool = False) -> bool:
    """Whether ``proc`` ended within ``seconds``. One that did not is killed and reaped; with
    ``dump``, SIGABRT first (a daemon's faulthandler prints every thread's stack to its log)."""
    try:
        proc.wait(seconds)
        return True
    except subprocess.TimeoutExpired:
        pass
    if dump:
        proc.send_signal(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
    proc.kill()
    proc.wait()
    return False
