"""kube-acc cli."""
