"""kube-acc synthetic."""
