"""Kafka's security as its clients configure it: listeners of each security protocol, TLS,
SASL (PLAIN, SCRAM) and ACLs."""
