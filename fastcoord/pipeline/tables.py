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
from fastcoord.pipeline.inputs import COLUMNS, TABLES, Inputs
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


def merged_latency(latency: DataFrame) -> DataFrame:
    """One row per run, second and API, as a run of --processes writes them: a distributed
    run's workers each write their own (the `worker` column), merged here, histograms
    and all."""
    keys = ["run", "elapsed_s", "api"]
    buckets = (
        latency.select(*keys, F.explode(F.arrays_zip("buckets", "counts")).alias("b"))
        .groupBy(*keys, F.col("b.buckets").alias("bucket"))
        .agg(F.sum(F.col("b.counts")).alias("n"))
        .groupBy(*keys)
        .agg(F.array_sort(F.collect_list(F.struct("bucket", "n"))).alias("h"))
        .select(
            *keys,
            F.col("h.bucket").cast("array<smallint>").alias("buckets"),
            F.col("h.n").cast("array<bigint>").alias("counts"),
        )
    )
    figures = latency.groupBy(*keys).agg(
        F.min("time").alias("time"),
        *(F.sum(c).alias(c) for c in ("count", "errors", "signals", "sum_us")),
        F.max("max_us").alias("max_us"),
    )
    # A row whose histogram is empty (no buckets) has none to explode: its figures stand.
    merged = figures.join(buckets, keys, "left").select(
        "time",
        "elapsed_s",
        "api",
        "count",
        "errors",
        "signals",
        F.coalesce("buckets", F.array().cast("array<smallint>")).alias("buckets"),
        F.coalesce("counts", F.array().cast("array<bigint>")).alias("counts"),
        "sum_us",
        "max_us",
        "run",
    )
    return merged


def merged_states(states: DataFrame) -> DataFrame:
    """One row per run and second: the workers' members, connections, requests and CPU
    added up (see merged_latency)."""
    summed = [c for c in states.columns if c not in ("run", "elapsed_s", "time")]
    return (
        states.groupBy("run", "elapsed_s")
        .agg(F.min("time").alias("time"), *(F.sum(c).alias(c) for c in summed))
        .select(*states.columns)
    )


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
        schema = pa.schema([f for f in SCHEMAS[table] if f.name in COLUMNS[table]])
        parts = [
            spark.read.parquet(*run.files[table])
            .select(*schema.names)
            .withColumn("run", F.lit(run.name))
            for run in inputs.runs
            if run.files.get(table)
        ]
        frame = parts[0] if parts else _empty(spark, schema).withColumn("run", F.lit(""))
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
        merged_latency(frames["latency"]),
        frames["rebalances"],
        frames["errors"],
        merged_states(frames["states"]),
        frames["server"],
        scoped(events, scopes),
        events,
        scopes,
        [run.name for run in inputs.runs],
    )
