from __future__ import annotations

from tests.crdfixtures import kubeacc_crds

__all__ = ["kubeacc_crds"]
