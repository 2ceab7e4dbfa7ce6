"""Coordinator-partition speed (Kafka's Utils.abs(groupId.hashCode()) % 50), compiled
(_ext/partition.pyx) against the pure-Python twin (core/partition.py) in the same run.

Inputs are built once at import and the classes have no `setup`, for the reason given in
bench_protocol.py (asv#966).
"""

from __future__ import annotations

from types import ModuleType

from fastcoord._ext import partition as compiled  # type: ignore[attr-defined]
from fastcoord.core import partition as twin

from .common import scaled

IMPLS: dict[str, ModuleType] = {"compiled": compiled, "twin": twin}

# The group id the protocol benchmarks use: 20 ASCII characters, as typical ids are.
GROUP_ID = "load-test-group-0007"
BATCH = scaled(100_000)
GROUP_IDS = [f"load-test-group-{i:06d}" for i in range(BATCH)]


class PartitionFor:
    """One group id: what FindCoordinator and every group lookup cost."""

    params = (["compiled", "twin"],)
    param_names = ["impl"]

    def time_partition_for(self, impl: str) -> None:
        IMPLS[impl].partition_for(GROUP_ID)


class PartitionsFor:
    """A batch of group ids, as when a coordinator loads every group it owns."""

    params = ([BATCH], ["compiled", "twin"])
    param_names = ["groups", "impl"]

    def time_partitions_for(self, groups: int, impl: str) -> None:
        IMPLS[impl].partitions_for(GROUP_IDS, 50)
