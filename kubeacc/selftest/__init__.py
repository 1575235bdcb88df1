"""The hardware conformance kit, ``kubeacc selftest`` (docs/selftest.md): checks of one node
against what kube-acc relies on, each passed, failed or skipped with its reason, and a report
an admin attaches to a bug."""
