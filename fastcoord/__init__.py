"""fastcoord: a Kafka consumer-group coordinator that real Kafka clients use unchanged."""

from fastcoord._version import __version__

__all__ = ["__version__"]
