"""Everything that touches ZooKeeper: the znode layout, stores, cache-watch
sync, controller election and the managed local ZooKeeper server.

Tokens, credentials and ACLs are each filed as a store and a sync
(``<kind>_store``, ``<kind>_sync``) on the one notification recipe
(:mod:`zk.notifications`); kazoo failures become store errors through the one
table of :mod:`zk.errors`; many znodes are read through :mod:`zk.reads`; only
:mod:`zk.client` reaches into kazoo's internals.

Nothing outside this package imports kazoo but ``cli/zookeeper_cmd.py``, which catches
kazoo's base exception around the security migration's walk (:mod:`zk.migration`).
"""
