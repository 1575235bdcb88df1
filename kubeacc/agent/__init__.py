"""The node agent: discovery, device plugin, DRA plugin, life cycle on its node."""
