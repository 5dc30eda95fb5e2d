"""The remoting client: the framework's ``rocketmq://`` transport.

- ``connection``: ``Connection`` (one TCP connection, pipelined calls matched by opaque, peer
  requests served off the reader thread, reconnect on demand) and ``Connections`` (one per
  address).
- ``routes``: ``RouteTable`` (topic routes from the name servers, cached, with failover) and
  the global queue numbering that maps a framework queue id to one (broker, queue).
- ``naming``: ``Namespace`` (``NS%topic``, ``%RETRY%NS%group``) for clusters shared by several
  applications.
- ``errors``: ``RemotingClientError`` and its subclasses; unreachable peers are also the
  store's ``BrokerUnavailableError``.
"""
