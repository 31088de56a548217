"""Field lists of every request and response tokensvc speaks, in the schema language.

The facts (names, types, versions, nullability, defaults, tags) are those of
Kafka 3.x's published message definitions; they are written down here in this
project's own form. ``f(name, type, since, until=, nullable=, default=, tag=)``
reads "field ``name`` exists from version ``since`` (to ``until``), may be null
from version ``nullable``". Which versions are flexible is in ``api``.

This module is data only: it must not encode, decode or know about headers.
"""

from __future__ import annotations

from tokensvc.protocol.api import ApiKey
from tokensvc.protocol.schema import (
    BOOL,
    BYTES,
    FLOAT64_T,
    INT8_T,
    INT16_T,
    INT32_T,
    INT64_T,
    STRING,
    UUID,
    Array,
    Struct,
    f,
)

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
LITERAL_PATTERN = 3


def _principal(name: str) -> Struct:
    return Struct(name, f("PrincipalType", STRING), f("PrincipalName", STRING))


def _labels(name: str, since: int = 0) -> Array:
    """A token's labels (tokensvc's tagged fields): ``[{Key, Value}]``."""
    return Array(Struct(name, f("Key", STRING, since), f("Value", STRING, since)))


# --- ApiVersions (18) ------------------------------------------------------

API_VERSIONS_REQUEST = Struct(
    "ApiVersionsRequest",
    f("ClientSoftwareName", STRING, 3),
    f("ClientSoftwareVersion", STRING, 3),
)

API_VERSIONS_RESPONSE = Struct(
    "ApiVersionsResponse",
    f("ErrorCode", INT16_T),
    f("ApiKeys", Array(Struct(
        "ApiVersion",
        f("ApiKey", INT16_T),
        f("MinVersion", INT16_T),
        f("MaxVersion", INT16_T),
    ))),
    f("ThrottleTimeMs", INT32_T, 1),
    f("SupportedFeatures", Array(Struct(
        "SupportedFeatureKey",
        f("Name", STRING, 3),
        f("MinVersion", INT16_T, 3),
        f("MaxVersion", INT16_T, 3),
    )), 3, tag=0),
    f("FinalizedFeaturesEpoch", INT64_T, 3, default=-1, tag=1),
    f("FinalizedFeatures", Array(Struct(
        "FinalizedFeatureKey",
        f("Name", STRING, 3),
        f("MaxVersionLevel", INT16_T, 3),
        f("MinVersionLevel", INT16_T, 3),
    )), 3, tag=2),
    f("ZkMigrationReady", BOOL, 3, default=False, tag=3),
)

# --- SASL (17, 36) ---------------------------------------------------------

SASL_HANDSHAKE_REQUEST = Struct("SaslHandshakeRequest", f("Mechanism", STRING))

SASL_HANDSHAKE_RESPONSE = Struct(
    "SaslHandshakeResponse",
    f("ErrorCode", INT16_T),
    f("Mechanisms", Array(STRING)),
)

SASL_AUTHENTICATE_REQUEST = Struct("SaslAuthenticateRequest", f("AuthBytes", BYTES))

SASL_AUTHENTICATE_RESPONSE = Struct(
    "SaslAuthenticateResponse",
    f("ErrorCode", INT16_T),
    f("ErrorMessage", STRING, nullable=0),
    f("AuthBytes", BYTES),
    f("SessionLifetimeMs", INT64_T, 1),
)

# --- Metadata (3) ----------------------------------------------------------

METADATA_REQUEST = Struct(
    "MetadataRequest",
    f("Topics", Array(Struct(
        "MetadataRequestTopic",
        f("TopicId", UUID, 10),
        f("Name", STRING, nullable=10),
    )), nullable=1),
    f("AllowAutoTopicCreation", BOOL, 4, default=True),
    f("IncludeClusterAuthorizedOperations", BOOL, 8, until=10),
    f("IncludeTopicAuthorizedOperations", BOOL, 8),
)

METADATA_RESPONSE = Struct(
    "MetadataResponse",
    f("ThrottleTimeMs", INT32_T, 3),
    f("Brokers", Array(Struct(
        "MetadataResponseBroker",
        f("NodeId", INT32_T),
        f("Host", STRING),
        f("Port", INT32_T),
        f("Rack", STRING, 1, nullable=1, default=None),
    ))),
    f("ClusterId", STRING, 2, nullable=2, default=None),
    f("ControllerId", INT32_T, 1, default=-1),
    f("Topics", Array(Struct(
        "MetadataResponseTopic",
        f("ErrorCode", INT16_T),
        f("Name", STRING, nullable=12),
        f("TopicId", UUID, 10),
        f("IsInternal", BOOL, 1, default=False),
        f("Partitions", Array(Struct(
            "MetadataResponsePartition",
            f("ErrorCode", INT16_T),
            f("PartitionIndex", INT32_T),
            f("LeaderId", INT32_T),
            f("LeaderEpoch", INT32_T, 7, default=-1),
            f("ReplicaNodes", Array(INT32_T)),
            f("IsrNodes", Array(INT32_T)),
            f("OfflineReplicas", Array(INT32_T), 5),
        ))),
        f("TopicAuthorizedOperations", INT32_T, 8, default=AUTHORIZED_OPERATIONS_OMITTED),
    ))),
    f("ClusterAuthorizedOperations", INT32_T, 8, until=10,
      default=AUTHORIZED_OPERATIONS_OMITTED),
)

# --- DescribeCluster (60) --------------------------------------------------

DESCRIBE_CLUSTER_REQUEST = Struct(
    "DescribeClusterRequest",
    f("IncludeClusterAuthorizedOperations", BOOL),
    f("EndpointType", INT8_T, 1, default=1),
)

DESCRIBE_CLUSTER_RESPONSE = Struct(
    "DescribeClusterResponse",
    f("ThrottleTimeMs", INT32_T),
    f("ErrorCode", INT16_T),
    f("ErrorMessage", STRING, nullable=0, default=None),
    f("EndpointType", INT8_T, 1, default=1),
    f("ClusterId", STRING),
    f("ControllerId", INT32_T, default=-1),
    f("Brokers", Array(Struct(
        "DescribeClusterBroker",
        f("BrokerId", INT32_T),
        f("Host", STRING),
        f("Port", INT32_T),
        f("Rack", STRING, nullable=0, default=None),
    ))),
    f("ClusterAuthorizedOperations", INT32_T, default=AUTHORIZED_OPERATIONS_OMITTED),
)

# --- Delegation tokens (38-41) ---------------------------------------------

# Tagged fields of tokensvc's own on the flexible v2+ (docs/protocol.md): the labels of the
# new token; the answer repeats them (null: the broker does not know labels) and says why
# they were refused. A client that sends no tag gets exactly Kafka's bytes.
CREATE_DELEGATION_TOKEN_REQUEST = Struct(
    "CreateDelegationTokenRequest",
    f("OwnerPrincipalType", STRING, 3, nullable=3),
    f("OwnerPrincipalName", STRING, 3, nullable=3),
    f("Renewers", Array(_principal("CreatableRenewers"))),
    f("MaxLifetimeMs", INT64_T),
    f("Labels", _labels("CreatableTokenLabel", 2), 2, default=[], tag=0),
)

CREATE_DELEGATION_TOKEN_RESPONSE = Struct(
    "CreateDelegationTokenResponse",
    f("ErrorCode", INT16_T),
    f("PrincipalType", STRING),
    f("PrincipalName", STRING),
    f("TokenRequesterPrincipalType", STRING, 3),
    f("TokenRequesterPrincipalName", STRING, 3),
    f("IssueTimestampMs", INT64_T),
    f("ExpiryTimestampMs", INT64_T),
    f("MaxTimestampMs", INT64_T),
    f("TokenId", STRING),
    f("Hmac", BYTES),
    f("ThrottleTimeMs", INT32_T),
    f("Labels", _labels("CreatedTokenLabel", 2), 2, nullable=2, default=None, tag=0),
    f("ErrorMessage", STRING, 2, nullable=2, default=None, tag=1),
)

RENEW_DELEGATION_TOKEN_REQUEST = Struct(
    "RenewDelegationTokenRequest",
    f("Hmac", BYTES),
    f("RenewPeriodMs", INT64_T),
)

RENEW_DELEGATION_TOKEN_RESPONSE = Struct(
    "RenewDelegationTokenResponse",
    f("ErrorCode", INT16_T),
    f("ExpiryTimestampMs", INT64_T),
    f("ThrottleTimeMs", INT32_T),
)

# Tagged fields of tokensvc's own on the flexible v2 (Kafka skips unknown tags, so every
# Kafka client's view is unchanged): revocation without HMACs -- every token of an owner,
# or tokens by id, or by label (with an owner or alone) -- with a dry run; the answer lists what was (or would be) revoked, the
# ids not found, and the owner's tokens created while the revocation ran.
EXPIRE_DELEGATION_TOKEN_REQUEST = Struct(
    "ExpireDelegationTokenRequest",
    f("Hmac", BYTES),
    f("ExpiryTimePeriodMs", INT64_T),
    f("RevokeOwner", _principal("RevokeOwnerPrincipal"), 2, nullable=2, default=None, tag=0),
    f("RevokeTokenIds", Array(STRING), 2, default=[], tag=1),
    f("RevokeDryRun", BOOL, 2, default=False, tag=2),
    f("RevokeLabels", _labels("RevokeLabel", 2), 2, default=[], tag=3),
)

EXPIRE_DELEGATION_TOKEN_RESPONSE = Struct(
    "ExpireDelegationTokenResponse",
    f("ErrorCode", INT16_T),
    f("ExpiryTimestampMs", INT64_T),
    f("ThrottleTimeMs", INT32_T),
    f("Revoked", Array(Struct(
        "RevokedToken",
        f("TokenId", STRING),
        f("OwnerType", STRING),
        f("OwnerName", STRING),
    )), 2, nullable=2, default=None, tag=0),
    f("RevokeNotFound", Array(STRING), 2, default=[], tag=1),
    f("RevokeCreatedAfter", Array(STRING), 2, default=[], tag=2),
    f("RevokeMessage", STRING, 2, nullable=2, default=None, tag=3),
)

# Tagged fields of tokensvc's own on the flexible v2+: a label selector (every label must
# be on the token) and whether the answer shows each token's labels. A client that sends
# neither gets exactly Kafka's bytes.
DESCRIBE_DELEGATION_TOKEN_REQUEST = Struct(
    "DescribeDelegationTokenRequest",
    f("Owners", Array(_principal("DescribeDelegationTokenOwner")), nullable=0),
    f("LabelSelector", _labels("DescribeTokenLabel", 2), 2, default=[], tag=0),
    f("IncludeLabels", BOOL, 2, default=False, tag=1),
)

DESCRIBE_DELEGATION_TOKEN_RESPONSE = Struct(
    "DescribeDelegationTokenResponse",
    f("ErrorCode", INT16_T),
    f("Tokens", Array(Struct(
        "DescribedDelegationToken",
        f("PrincipalType", STRING),
        f("PrincipalName", STRING),
        f("TokenRequesterPrincipalType", STRING, 3),
        f("TokenRequesterPrincipalName", STRING, 3),
        f("IssueTimestamp", INT64_T),
        f("ExpiryTimestamp", INT64_T),
        f("MaxTimestamp", INT64_T),
        f("TokenId", STRING),
        f("Hmac", BYTES),
        f("Renewers", Array(_principal("DescribedDelegationTokenRenewer"))),
        f("Labels", _labels("DescribedTokenLabel", 2), 2, default=[], tag=0),
    ))),
    f("ThrottleTimeMs", INT32_T),
    f("ErrorMessage", STRING, 2, nullable=2, default=None, tag=0),
)

# --- ACLs (29-31) ----------------------------------------------------------


def _acl_filter_fields() -> tuple:
    return (
        f("ResourceTypeFilter", INT8_T),
        f("ResourceNameFilter", STRING, nullable=0),
        f("PatternTypeFilter", INT8_T, 1, default=LITERAL_PATTERN),
        f("PrincipalFilter", STRING, nullable=0),
        f("HostFilter", STRING, nullable=0),
        f("Operation", INT8_T),
        f("PermissionType", INT8_T),
    )


CREATE_ACLS_REQUEST = Struct(
    "CreateAclsRequest",
    f("Creations", Array(Struct(
        "AclCreation",
        f("ResourceType", INT8_T),
        f("ResourceName", STRING),
        f("ResourcePatternType", INT8_T, 1, default=LITERAL_PATTERN),
        f("Principal", STRING),
        f("Host", STRING),
        f("Operation", INT8_T),
        f("PermissionType", INT8_T),
    ))),
)

CREATE_ACLS_RESPONSE = Struct(
    "CreateAclsResponse",
    f("ThrottleTimeMs", INT32_T),
    f("Results", Array(Struct(
        "AclCreationResult",
        f("ErrorCode", INT16_T),
        f("ErrorMessage", STRING, nullable=0),
    ))),
)

DESCRIBE_ACLS_REQUEST = Struct("DescribeAclsRequest", *_acl_filter_fields())

DESCRIBE_ACLS_RESPONSE = Struct(
    "DescribeAclsResponse",
    f("ThrottleTimeMs", INT32_T),
    f("ErrorCode", INT16_T),
    f("ErrorMessage", STRING, nullable=0),
    f("Resources", Array(Struct(
        "DescribeAclsResource",
        f("ResourceType", INT8_T),
        f("ResourceName", STRING),
        f("PatternType", INT8_T, 1, default=LITERAL_PATTERN),
        f("Acls", Array(Struct(
            "AclDescription",
            f("Principal", STRING),
            f("Host", STRING),
            f("Operation", INT8_T),
            f("PermissionType", INT8_T),
        ))),
    ))),
)

DELETE_ACLS_REQUEST = Struct(
    "DeleteAclsRequest",
    f("Filters", Array(Struct("DeleteAclsFilter", *_acl_filter_fields()))),
)

DELETE_ACLS_RESPONSE = Struct(
    "DeleteAclsResponse",
    f("ThrottleTimeMs", INT32_T),
    f("FilterResults", Array(Struct(
        "DeleteAclsFilterResult",
        f("ErrorCode", INT16_T),
        f("ErrorMessage", STRING, nullable=0),
        f("MatchingAcls", Array(Struct(
            "DeleteAclsMatchingAcl",
            f("ErrorCode", INT16_T),
            f("ErrorMessage", STRING, nullable=0),
            f("ResourceType", INT8_T),
            f("ResourceName", STRING),
            f("PatternType", INT8_T, 1, default=LITERAL_PATTERN),
            f("Principal", STRING),
            f("Host", STRING),
            f("Operation", INT8_T),
            f("PermissionType", INT8_T),
        ))),
    ))),
)

# --- Client quotas (48, KIP-546): describe only -----------------------------

# MatchType: 0 an exact name (Match), 1 the default entity, 2 any specified name.
QUOTA_MATCH_EXACT = 0
QUOTA_MATCH_DEFAULT = 1
QUOTA_MATCH_SPECIFIED = 2

DESCRIBE_CLIENT_QUOTAS_REQUEST = Struct(
    "DescribeClientQuotasRequest",
    f("Components", Array(Struct(
        "ComponentData",
        f("EntityType", STRING),
        f("MatchType", INT8_T),
        f("Match", STRING, nullable=0),
    ))),
    f("Strict", BOOL),
)

DESCRIBE_CLIENT_QUOTAS_RESPONSE = Struct(
    "DescribeClientQuotasResponse",
    f("ThrottleTimeMs", INT32_T),
    f("ErrorCode", INT16_T),
    f("ErrorMessage", STRING, nullable=0),
    f("Entries", Array(Struct(
        "EntryData",
        f("Entity", Array(Struct(
            "EntityData",
            f("EntityType", STRING),
            f("EntityName", STRING, nullable=0),
        ))),
        f("Values", Array(Struct(
            "ValueData",
            f("Key", STRING),
            f("Value", FLOAT64_T),
        ))),
    )), nullable=0),
)

# --- SCRAM credentials (50, 51) --------------------------------------------

DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST = Struct(
    "DescribeUserScramCredentialsRequest",
    f("Users", Array(Struct("UserName", f("Name", STRING))), nullable=0),
)

DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE = Struct(
    "DescribeUserScramCredentialsResponse",
    f("ThrottleTimeMs", INT32_T),
    f("ErrorCode", INT16_T),
    f("ErrorMessage", STRING, nullable=0),
    f("Results", Array(Struct(
        "DescribeUserScramCredentialsResult",
        f("User", STRING),
        f("ErrorCode", INT16_T),
        f("ErrorMessage", STRING, nullable=0),
        f("CredentialInfos", Array(Struct(
            "CredentialInfo",
            f("Mechanism", INT8_T),
            f("Iterations", INT32_T),
        ))),
    ))),
)

ALTER_USER_SCRAM_CREDENTIALS_REQUEST = Struct(
    "AlterUserScramCredentialsRequest",
    f("Deletions", Array(Struct(
        "ScramCredentialDeletion",
        f("Name", STRING),
        f("Mechanism", INT8_T),
    ))),
    f("Upsertions", Array(Struct(
        "ScramCredentialUpsertion",
        f("Name", STRING),
        f("Mechanism", INT8_T),
        f("Iterations", INT32_T),
        f("Salt", BYTES),
        f("SaltedPassword", BYTES),
    ))),
)

ALTER_USER_SCRAM_CREDENTIALS_RESPONSE = Struct(
    "AlterUserScramCredentialsResponse",
    f("ThrottleTimeMs", INT32_T),
    f("Results", Array(Struct(
        "AlterUserScramCredentialsResult",
        f("User", STRING),
        f("ErrorCode", INT16_T),
        f("ErrorMessage", STRING, nullable=0),
    ))),
)

# --- Envelope (58, KIP-590) ------------------------------------------------

# Tagged fields of tokensvc's own (Kafka skips unknown tags, so the wire stays
# compatible): the request key of an exactly-once write and whether this is its first
# attempt; in the response, the notification versions the controller committed and the
# token states its token writes committed (no HMAC: the receiver derives it).
ENVELOPE_REQUEST = Struct(
    "EnvelopeRequest",
    f("RequestData", BYTES),
    f("RequestPrincipal", BYTES, nullable=0),
    f("ClientHostAddress", BYTES),
    f("RequestKey", STRING, nullable=0, default=None, tag=0),
    f("FirstAttempt", BOOL, default=False, tag=1),
)

ENVELOPE_RESPONSE = Struct(
    "EnvelopeResponse",
    f("ResponseData", BYTES, nullable=0, default=None),
    f("ErrorCode", INT16_T),
    f("CommittedVersions", Array(Struct(
        "CommittedVersion",
        f("Root", STRING),
        f("Sequence", INT64_T),
    )), default=[], tag=0),
    f("CommittedTokens", Array(Struct(
        "CommittedToken",
        f("Sequence", INT64_T),
        f("TokenId", STRING),
        f("Deleted", BOOL),
        f("OwnerType", STRING),
        f("OwnerName", STRING),
        f("RequesterType", STRING),
        f("RequesterName", STRING),
        f("Renewers", Array(Struct(
            "CommittedTokenRenewer",
            f("PrincipalType", STRING),
            f("PrincipalName", STRING),
        ))),
        f("IssueTimestamp", INT64_T),
        f("ExpiryTimestamp", INT64_T),
        f("MaxTimestamp", INT64_T),
        f("KeyId", STRING),
        f("Labels", _labels("CommittedTokenLabel"), default=[], tag=0),
    )), default=[], tag=1),
)

# --- Not an API: the principal carried in an envelope ----------------------

DEFAULT_PRINCIPAL_DATA = Struct(
    "DefaultPrincipalData",
    f("Type", STRING),
    f("Name", STRING),
    f("TokenAuthenticated", BOOL),
)


REQUESTS: dict[ApiKey, Struct] = {
    ApiKey.API_VERSIONS: API_VERSIONS_REQUEST,
    ApiKey.SASL_HANDSHAKE: SASL_HANDSHAKE_REQUEST,
    ApiKey.SASL_AUTHENTICATE: SASL_AUTHENTICATE_REQUEST,
    ApiKey.METADATA: METADATA_REQUEST,
    ApiKey.DESCRIBE_CLUSTER: DESCRIBE_CLUSTER_REQUEST,
    ApiKey.CREATE_DELEGATION_TOKEN: CREATE_DELEGATION_TOKEN_REQUEST,
    ApiKey.RENEW_DELEGATION_TOKEN: RENEW_DELEGATION_TOKEN_REQUEST,
    ApiKey.EXPIRE_DELEGATION_TOKEN: EXPIRE_DELEGATION_TOKEN_REQUEST,
    ApiKey.DESCRIBE_DELEGATION_TOKEN: DESCRIBE_DELEGATION_TOKEN_REQUEST,
    ApiKey.CREATE_ACLS: CREATE_ACLS_REQUEST,
    ApiKey.DESCRIBE_ACLS: DESCRIBE_ACLS_REQUEST,
    ApiKey.DELETE_ACLS: DELETE_ACLS_REQUEST,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: DESCRIBE_CLIENT_QUOTAS_REQUEST,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: ALTER_USER_SCRAM_CREDENTIALS_REQUEST,
    ApiKey.ENVELOPE: ENVELOPE_REQUEST,
}

RESPONSES: dict[ApiKey, Struct] = {
    ApiKey.API_VERSIONS: API_VERSIONS_RESPONSE,
    ApiKey.SASL_HANDSHAKE: SASL_HANDSHAKE_RESPONSE,
    ApiKey.SASL_AUTHENTICATE: SASL_AUTHENTICATE_RESPONSE,
    ApiKey.METADATA: METADATA_RESPONSE,
    ApiKey.DESCRIBE_CLUSTER: DESCRIBE_CLUSTER_RESPONSE,
    ApiKey.CREATE_DELEGATION_TOKEN: CREATE_DELEGATION_TOKEN_RESPONSE,
    ApiKey.RENEW_DELEGATION_TOKEN: RENEW_DELEGATION_TOKEN_RESPONSE,
    ApiKey.EXPIRE_DELEGATION_TOKEN: EXPIRE_DELEGATION_TOKEN_RESPONSE,
    ApiKey.DESCRIBE_DELEGATION_TOKEN: DESCRIBE_DELEGATION_TOKEN_RESPONSE,
    ApiKey.CREATE_ACLS: CREATE_ACLS_RESPONSE,
    ApiKey.DESCRIBE_ACLS: DESCRIBE_ACLS_RESPONSE,
    ApiKey.DELETE_ACLS: DELETE_ACLS_RESPONSE,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: DESCRIBE_CLIENT_QUOTAS_RESPONSE,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: ALTER_USER_SCRAM_CREDENTIALS_RESPONSE,
    ApiKey.ENVELOPE: ENVELOPE_RESPONSE,
}
