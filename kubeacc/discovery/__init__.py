"""Discovery: what is really on a node, read through one host root."""

from typing import TYPE_CHECKING, Any

from kubeacc.discovery.backends.admin import ConfigError, load_config
from kubeacc.discovery.discover import default_backends, discover
from kubeacc.host.files import HostRoot, WarningSink

if TYPE_CHECKING:
    from kubeacc.discovery.backends.adminconfig import DiscoveryConfig


def __getattr__(name: str) -> Any:
    """``DiscoveryConfig`` on first use: its module imports pydantic, which a node without an
    admin discovery file never needs."""
    if name == "DiscoveryConfig":
        from kubeacc.discovery.backends.adminconfig import DiscoveryConfig

        return DiscoveryConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ConfigError",
    "DiscoveryConfig",
    "HostRoot",
    "WarningSink",
    "default_backends",
    "discover",
    "load_config",
]
