"""The remoting client: the framework's ``rocketmq://`` transport (``docs/remote-transport.md``,
``docs/remoting-consumer.md``).

- ``remote_broker``: ``RemotingBroker``, the ``BrokerClient`` over remoting; its parts share a
  ``context.ClientContext``.
- ``connection``: ``Connection`` (one TCP connection, pipelined calls matched by opaque, peer
  requests served off the reader thread, reconnect on demand) and ``Connections`` (one per
  address).
- ``routes``: ``RouteTable`` (topic routes from the name servers, cached, with failover) and
  the global queue numbering that maps a framework queue id to one (broker, queue).
- ``naming``: ``Namespace`` (``NS%topic``, ``%RETRY%NS%group``) for clusters shared by several
  applications.
- producer and admin side: ``sending`` (with ``send_lanes``), ``admin_calls``.
- consumer side: ``consuming``, ``pulling``, ``pull_answers``, ``membership``, ``records``.
- ``errors``, ``broker_errors``: ``RemotingClientError`` and its subclasses; unreachable peers
  are also the store's ``BrokerUnavailableError``, broker refusals the store's errors.
"""
