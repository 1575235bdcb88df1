from tests.crdfixtures import kubeacc_cleanup, kubeacc_crds  # noqa: F401 - fixtures
