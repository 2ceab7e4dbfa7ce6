"""`fastcoord loadtest --master spark://...`: the workers as a barrier stage on a real
standalone Spark cluster on loopback (a master and two workers of two cores each, the
installed pyspark's daemons), the same checked run as on `local[4]`: the workers start
together, on executors of their own, each writes its own tables, and the driver's summary
adds up to theirs and to what the server counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastcoord.testing import ServerProcess, spark_standalone
from tests.interop.test_loadtest_spark import check_distributed_run
from tests.interop.test_loadtest_spark import server as server  # its fixture, re-exported

pytestmark = pytest.mark.spark

DAEMONS = 2
CORES = 2
WORKERS = DAEMONS * CORES  # a barrier stage needs every slot at once


def test_four_workers_on_a_standalone_cluster(
    server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The driver on loopback too, as the cluster is: on a master other than local, Spark
    # would take the machine's first address that is not loopback (the run inherits this).
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    with spark_standalone(tmp_path / "spark", workers=DAEMONS, cores=CORES) as cluster:
        assert cluster.slots == WORKERS
        s = check_distributed_run(server, tmp_path, cluster.master_url, WORKERS)
    assert s["workers"]["master"] == cluster.master_url
