"""``kubeacc status``: is kube-acc healthy on this cluster, check by check, each with its fix.

:mod:`.model` holds a check's result, :mod:`.cluster` the checks of the cluster as a whole
(API server, DRA gates, CRDs, controller, extender), :mod:`.nodes` those of each node (agent,
published devices, driver and NVML, as the agent reports them).
"""
