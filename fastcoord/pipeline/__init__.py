"""`fastcoord report`: what load tests measured and what the server logged, analysed on Spark.

A 100k-member load test of an hour holds about 120 million heartbeats, more than one
process should hold at once, so the analysis runs on Spark through PySpark: locally by
default (`local[*]`), on any cluster with `--master`. pyspark is imported in this package
only, and only when a report is asked for; the rest of fastcoord never needs it.
"""
