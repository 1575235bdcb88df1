"""Device plugin mode: the kubelet's v1beta1 device plugin API for every accelerator type."""
