"""What two daemons agree on, defined once below all of them.

The agent, the device plugin, the life-cycle agent, the controller and the extender never import
each other (``tests/test_layers.py``): a name, a format or a limit that more than one of them
writes or reads lives here. ``names`` (driver, attribute, annotation, label and taint names),
``wants`` and ``trusted`` (the extender's placement decision on a pod and which copy of it to
believe), ``arenas`` (the glibc arena limit every daemon starts with), ``unitid`` (device-plugin
unit ids that the agent's users and telemetry read back).
"""
