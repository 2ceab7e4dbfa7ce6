"""The inputs as Spark DataFrames: each loadtest table over every run, with a `run` column,
and the event logs of every node as one. Only the columns the report uses are read, so files
that carry more (a newer writer) read the same; empty inputs give empty frames of the right
schema.

The event logs are read with the event log's schema given, not found from a file: a file
written before a column was added reads with nulls there, whichever file Spark would have
looked at. A row without its node takes the node of its log's directory.

A run's server-side figures are the events of its own groups within its own time
(scope.py): each event is given the run (or runs) it belongs to, and events of no run
are left out, and counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from fastcoord.loadtest.results import SCHEMAS
from fastcoord.pipeline.inputs import TABLES, Inputs
from fastcoord.pipeline.scope import MARGIN_MS, event_bounds
from fastcoord.server import event_log

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class Tables:
    latency: DataFrame
    rebalances: DataFrame
    errors: DataFrame
    states: DataFrame
    server: DataFrame
    events: DataFrame  # scoped: each with its run
    every_event: DataFrame  # as the logs hold them, for what was left out
    scopes: DataFrame
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


def belongs() -> Column:
    """An event of a run's groups within its time, joined to `scopes`: run, group_pattern,
    start_ms, end_ms (nulls: no bound)."""
    at = F.unix_millis("at")
    return (
        (F.col("group_pattern").isNull() | F.expr("group_id RLIKE group_pattern"))
        & (F.col("start_ms").isNull() | (at >= F.col("start_ms") - MARGIN_MS))
        & (F.col("end_ms").isNull() | (at <= F.col("end_ms") + MARGIN_MS))
    )


def scoped(events: DataFrame, scopes: DataFrame) -> DataFrame:
    """`events` with the run each belongs to (an event of two runs twice, one of none not
    at all)."""
    return events.join(F.broadcast(scopes), belongs()).drop("group_pattern", "start_ms", "end_ms")


def of_no_run(events: DataFrame, scopes: DataFrame) -> DataFrame:
    """The events that belong to no run: left out of the report."""
    return events.join(F.broadcast(scopes), belongs(), "left_anti")


def scopes_of(spark: SparkSession, inputs: Inputs) -> DataFrame:
    """run, group_pattern, start_ms, end_ms: each run's server events. A run without its
    summary has none (which groups and time were its, it does not say); without a run, the
    event logs are read whole, under the run name ''."""
    bounds = [(run.name, *event_bounds(run.summary)) for run in inputs.runs if run.summary]
    if not inputs.runs:
        bounds = [("", None, None, None)]
    schema = "run string, group_pattern string, start_ms long, end_ms long"
    return spark.createDataFrame(bounds, schema)


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
    scopes = scopes_of(spark, inputs)
    events = nodes[0] if nodes else _empty(spark, schema)
    for node in nodes[1:]:
        events = events.unionByName(node)
    return Tables(
        frames["latency"],
        frames["rebalances"],
        frames["errors"],
        frames["states"],
        frames["server"],
        scoped(events, scopes),
        events,
        scopes,
        [run.name for run in inputs.runs],
    )
