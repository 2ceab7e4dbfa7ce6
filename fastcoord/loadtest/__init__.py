"""`fastcoord loadtest`: a fleet of simulated group members against any Kafka coordinator,
with the measurements a coordinator's users want kept (latency per API, rebalances as the
members saw them, errors apart from the protocol's signals, member states, the server's CPU
and memory) as Parquet and a summary that sets the steady phase apart from the joins and
leaves."""
