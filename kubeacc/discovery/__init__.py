"""Discovery: what is really on a node, read through one host root."""

from kubeacc.discovery.backends.admin import ConfigError, DiscoveryConfig, load_config
from kubeacc.discovery.discover import default_backends, discover
from kubeacc.host.files import HostRoot, WarningSink

__all__ = [
    "ConfigError",
    "DiscoveryConfig",
    "HostRoot",
    "WarningSink",
    "default_backends",
    "discover",
    "load_config",
]
