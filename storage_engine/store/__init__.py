"""The store core: commit log, consume queues, key index, flush, recovery, retention.

Imports nothing of the broker, the replication or the network layers.
"""
