"""``kubeacc extender``: a kube-scheduler extender for device-plugin clusters.

It decides which GPUs of a node a pod's containers get (whole GPUs by topology, memory/core
shares by free memory per GPU, model wishes), records the decision on the pod at bind time
(condition :data:`kubeacc.contracts.names.DECISION_CONDITION`, the record that counts, and
annotation :data:`kubeacc.contracts.names.DECISION_ANNOTATION`) and binds; the node agent's
device plugin reads the decision in Allocate. See docs/extender.md.
"""
