"""Apache RocketMQ's classic TCP "remoting" protocol: wire formats, the server, the client.

``reference/rocketmq-remoting.md`` has the facts. Modules:

- ``codes``: request, response and language codes.
- ``wire``: ``RemotingCommand``, JSON and binary headers, ``FrameDecoder`` (bounded, sans-IO),
  ``HeaderFields`` (typed, checked reads of the custom header).
- ``fastjson``: bodies as Java nodes write them (unquoted number keys, object keys).

The server (a name server and a broker over one embedded ``Broker``, in ``postbox broker
start``) and the client (the framework's ``rocketmq://`` transport) build on these.
"""
