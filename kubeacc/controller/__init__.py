"""The kube-acc controller: policies -> DeviceClasses, the operation state machine, inventory GC."""
