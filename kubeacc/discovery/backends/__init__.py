"""kube-acc discovery/backends."""
