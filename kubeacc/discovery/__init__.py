"""kube-acc discovery."""
