"""Broker semantics over the store: topics, groups, offsets, send-back, delay, consumers.

Imports the store core; nothing of the network layer.
"""
