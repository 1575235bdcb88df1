"""The DRA driver (its name: ``kubeacc.contracts.names.DRIVER_NAME``): slices and the plugin."""

#: Field manager of every server-side apply the agent makes.
FIELD_MANAGER = "kubeacc-agent"

__all__ = ["FIELD_MANAGER"]
