"""Apache RocketMQ's classic TCP "remoting" protocol: what the client and the servers share.

``reference/rocketmq-remoting.md`` has the facts. Modules:

- ``codes``: request, response and language codes.
- ``wire``: ``RemotingCommand``, JSON and binary headers, ``FrameDecoder`` (bounded, sans-IO),
  ``HeaderFields`` (typed, checked reads of the custom header).
- ``fastjson``: bodies as Java nodes write them (unquoted number keys, object keys).
- ``acl_signature``: RocketMQ's ACL 1.0 request signature (signing and verifying).
- ``route_data``: ``QueueData``, a broker's share of a topic in a route.

The client (``network.client``, the framework's ``rocketmq://`` transport) and the servers
(``broker_node``: a name server and a broker over one embedded ``Broker``, in ``postbox broker
start``) build on these. Stdlib only.
"""
