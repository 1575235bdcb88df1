"""The DRA driver ``kubeacc.io``: ResourceSlices, DeviceClasses and the kubelet plugin."""

DRIVER_NAME = "kubeacc.io"
#: Prefix of every attribute and capacity the driver publishes (``kubeacc.io/type`` ...).
ATTR_DOMAIN = "kubeacc.io"
#: Field manager of every server-side apply the agent makes.
FIELD_MANAGER = "kubeacc-agent"

__all__ = ["ATTR_DOMAIN", "DRIVER_NAME", "FIELD_MANAGER"]
