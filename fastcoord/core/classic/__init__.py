"""The classic group protocol: JoinGroup, SyncGroup, Heartbeat and LeaveGroup, by job.

Each module is one job of Kafka's GroupCoordinator for classic groups; each function takes
the GroupManager (the groups, and the Context to arm timers and write records). The
modules import one another in one direction: responses, session, records, rebalance,
leave, then join and sync.
"""
