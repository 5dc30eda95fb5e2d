"""The broker node: what ``postbox broker start`` serves over one embedded ``Broker``.

At the edge beside the CLI: only the CLI (and ``bench/``) import it; nothing of
``storage_engine``, ``network``, ``framework`` or the layers above does (``.importlinter``).

- ``node``: ``BrokerNode``, which composes the parts below (the CLI's ``broker start`` runs it).
- ``remoting_node``: ``RemotingNode`` — the remoting broker, the name server and the
  registration with external name servers, over RocketMQ's classic remoting protocol
  (``network.protocol``).
- ``server/``: the selectors remoting server and the broker's data plane (``server/broker``).
- ``admin/``: the broker codes of ``mqadmin``; ``namesrv/``: the name server.
- ``registration``: REGISTER_BROKER with external name servers.
- ``access``: ACL 1.0 on the remoting listeners; ``acl_file``: the access-control file both
  the remoting listeners and the gRPC server read.
- ``grpc_v2/``: Apache RocketMQ 5's gRPC ``MessagingService`` (grpcio, the ``server`` extra).
"""
