"""A SparkSession for the report: quiet, in UTC, its Java found (java.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fastcoord.pipeline.java import java_home

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"


def spark_session(
    master: str = DEFAULT_MASTER,
    app_name: str = "fastcoord report",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A session on `master`, with `conf` (Spark's settings) beside ours. Java comes from
    java_home() unless JAVA_HOME already names a usable one. Spark's own console output is
    kept to errors."""
    home, _ = java_home()
    os.environ["JAVA_HOME"] = str(home)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    if master.startswith("local"):
        # Nothing leaves this machine: the driver listens on loopback only.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    builder = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # Adaptive execution sizes the shuffles to the data: a small run is not split
        # into 200 partitions, a big one is not held in a few.
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.adaptive.coalescePartitions.enabled", "true")
    )
    for key, value in (conf or {}).items():  # the caller's settings win
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
