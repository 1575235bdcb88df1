"""The NVIDIA host tools of a synthetic host (``/usr/bin/nvidia-smi``,
``/usr/bin/nvidia-cuda-mps-control``) and the mutable GPU state they share with the synthetic
NVML (:mod:`kubeacc.synthetic.tools.hoststate`).

:func:`install` writes small launchers into a synthetic host; each runs one module of this
package with the interpreter named by ``KUBEACC_SYNTHETIC_PYTHON`` (the agent sets it to its
own when it runs a synthetic host's tools: :class:`kubeacc.synthetic.host.SyntheticHost`). The
tools take the same arguments and environment as the real ones and leave their effects where the
synthetic NVML and the tests read them.
"""

from __future__ import annotations

from pathlib import Path

#: Executable name on the host -> module that implements it.
TOOLS = {
    "nvidia-smi": "kubeacc.synthetic.tools.nvidia_smi",
    "nvidia-cuda-mps-control": "kubeacc.synthetic.tools.mps_control",
}


#: The interpreter a launcher runs (one that can import kubeacc); ``python3`` when unset.
PYTHON_ENV = "KUBEACC_SYNTHETIC_PYTHON"


def install(root: Path) -> None:
    """Write ``<root>/usr/bin/<tool>`` for every tool (mode 0755)."""
    bindir = root / "usr" / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for name, module in TOOLS.items():
        path = bindir / name
        path.write_text(
            "#!/bin/sh\n"
            f'exec "${{{PYTHON_ENV}:-python3}}" -c '
            f"'import sys; from {module} import main; sys.exit(main(sys.argv[1:]))' "
            '"$0" "$@"\n'
        )
        path.chmod(0o755)
