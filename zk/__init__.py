"""Everything that touches ZooKeeper: the znode layout, stores, cache-watch
sync, controller election and the managed local ZooKeeper server.

Nothing outside this package imports kazoo.
"""
