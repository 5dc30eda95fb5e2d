"""Postbox's network client side: RocketMQ's classic TCP "remoting" protocol and its client.

- ``network.protocol``: what both sides of a remoting connection share — frames and headers
  (``wire``), request and response codes (``codes``), the fastjson dialect of RocketMQ's Java
  nodes (``fastjson``), the ACL 1.0 request signature (``acl_signature``) and route data
  (``route_data``). Stdlib only.
- ``network.client``: ``RemotingBroker``, the framework's ``rocketmq://`` transport — a
  ``BrokerClient`` (the broker contract, ``storage_engine.contract``) against a Postbox broker
  or an Apache RocketMQ cluster. It imports the contract, ``storage_engine.formats`` and the
  protocol, never the store or the broker.

The servers (the remoting broker, the name server, admin, registration, RocketMQ 5 gRPC, the ACL
file) are the broker node's: ``broker_node``, at the edge beside the CLI. The store
(``storage_engine``) imports nothing of this package (the layers, checked by import-linter).
"""
