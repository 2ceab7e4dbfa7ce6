"""`fastcoord loadtest`: a fleet of simulated group members against any Kafka coordinator,
with the measurements a coordinator's users want kept (latency per API, rebalances as the
members saw them, errors, member states) as Parquet and a summary."""
