"""The inputs as Spark DataFrames: each loadtest table over every run, with a `run` column,
and the event logs of every node as one. Only the columns the report uses are read, so files
that carry more (a newer writer) read the same; empty inputs give empty frames of the right
schema.

The event logs are read with the event log's schema given, not found from a file: a file
written before a column was added reads with nulls there, whichever file Spark would have
looked at. A row without its node takes the node of its log's directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from fastcoord.loadtest.results import SCHEMAS
from fastcoord.pipeline.inputs import TABLES, Inputs
from fastcoord.server import event_log

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class Tables:
    latency: DataFrame
    rebalances: DataFrame
    errors: DataFrame
    states: DataFrame
    events: DataFrame
    runs: list[str]


def _empty(spark: SparkSession, schema: pa.Schema) -> DataFrame:
    return spark.createDataFrame([], from_arrow_schema(schema))


def plain(schema: pa.Schema) -> pa.Schema:
    """Dictionary-encoded strings as plain strings (what Spark reads them as)."""
    return pa.schema(
        [
            pa.field(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type)
            for f in schema
        ]
    )


def load(spark: SparkSession, inputs: Inputs) -> Tables:
    frames: dict[str, DataFrame] = {}
    for table in TABLES:
        columns = SCHEMAS[table].names
        parts = [
            spark.read.parquet(*run.files[table])
            .select(*columns)
            .withColumn("run", F.lit(run.name))
            for run in inputs.runs
            if run.files.get(table)
        ]
        frame = parts[0] if parts else _empty(spark, SCHEMAS[table]).withColumn("run", F.lit(""))
        for part in parts[1:]:
            frame = frame.unionByName(part)
        frames[table] = frame
    schema = plain(event_log.SCHEMA)
    nodes = [
        spark.read.schema(from_arrow_schema(schema))
        .parquet(*d.files)
        .withColumn("node_id", F.coalesce("node_id", F.lit(d.node).cast("int")))
        for d in inputs.event_dirs
        if d.files
    ]
    events = nodes[0] if nodes else _empty(spark, schema)
    for node in nodes[1:]:
        events = events.unionByName(node)
    return Tables(
        frames["latency"],
        frames["rebalances"],
        frames["errors"],
        frames["states"],
        events,
        [run.name for run in inputs.runs],
    )
