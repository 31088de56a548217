"""Authorization: Kafka's ACL model and a pure ACL authorizer (KIP-801 semantics).

Layout: ``acl`` (enums with Kafka's wire codes, resource patterns, entries,
bindings, filters, validation, the name strings Kafka writes in ZooKeeper),
``authorizer`` (:class:`AclAuthorizer`: decisions and KIP-430 bitfields),
``tokens`` (the permission checks of the delegation token APIs), ``wire`` (ACL
values to and from the CreateAcls/DescribeAcls/DeleteAcls body dicts).

Nothing here does I/O: ACLs arrive through ``AclAuthorizer.load`` and
``apply_resource`` (fed by :mod:`zk.acl_sync`), and decisions are plain calls.
``tokensvc.authz.AclAuthorizer`` is also the name ``authorizer.class.name`` accepts.
"""

from tokensvc.authz.authorizer import AclAuthorizer

__all__ = ["AclAuthorizer"]
