"""Node topology: device distances, the topology graph and placement."""
