from __future__ import annotations

from tests.crdfixtures import kubeacc_cleanup, kubeacc_crds

__all__ = ["kubeacc_cleanup", "kubeacc_crds"]
