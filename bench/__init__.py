"""Reproducible benchmarks: the store, durability, consumption, the outbox, the remote transport
and replication, with the peer queues and brokers they are compared against."""
