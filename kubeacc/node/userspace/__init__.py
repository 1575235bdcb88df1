"""The vendor driver's user space a container needs beside its device nodes (docs/dra.md,
"Driver user space"): found on the node from the driver root, handed to the container by the
CDI specs (read-only mounts and the ld-cache hook)."""
