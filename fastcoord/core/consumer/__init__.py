"""The consumer group protocol (Kafka's KIP-848): server-side assignment, reconciliation.

A consumer group's members send ConsumerGroupHeartbeat; the coordinator computes the
group's target assignment with a server-side assignor and walks each member to it one
step at a time, so that a partition is revoked from its owner before anyone else gets it.

ConsumerGroupHeartbeat is handled by job, each module taking the GroupManager; they import
one another in one direction: writes, subscriptions, target, members, sessions, leave, then
heartbeat.
"""
