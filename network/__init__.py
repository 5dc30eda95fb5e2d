"""Postbox's network layer: every wire format, server and client, outside the stdlib-only store.

- ``network.remoting``: Apache RocketMQ's classic TCP "remoting" protocol (name server and
  broker), served by ``postbox broker start`` and spoken by the framework's ``rocketmq://``
  transport — against a Postbox broker or an Apache RocketMQ cluster.
- ``network.grpc_v2``: Apache RocketMQ 5's gRPC ``apache.rocketmq.v2.MessagingService``, served
  for the official RocketMQ 5 clients.
- ``network.acl_file``: the access-control file both servers read (accounts and their rights).

The store (``storage_engine``) imports nothing of this package (the layers, checked by
import-linter); this package uses the store and broker through their Python API.
"""
