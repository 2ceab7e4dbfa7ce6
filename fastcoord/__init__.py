"""fastcoord: a Kafka consumer-group coordinator that real Kafka clients use unchanged."""

from typing import TYPE_CHECKING

from fastcoord._version import __version__

if TYPE_CHECKING:
    # The twin's signature types the export; at run time it is the selected implementation's.
    from fastcoord.core.partition import partition_for
else:
    from fastcoord.core.native import partition as _partition

    partition_for = _partition.partition_for
    del _partition

__all__ = ["__version__", "partition_for"]
