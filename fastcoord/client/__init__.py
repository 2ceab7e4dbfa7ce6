"""A Kafka client for simulated group members, on fastcoord's own protocol layer.

Load tests need thousands of consumers that do exactly what the group protocol asks and
nothing else: find the coordinator, join, sync, heartbeat, commit, leave. Real client
libraries carry fetchers, buffers and threads per consumer; these members carry only their
group state, so one process drives a fleet of them.
"""
