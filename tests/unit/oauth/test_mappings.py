"""The mappings file: parsing (errors name table and key), matching, the token policy."""

from __future__ import annotations

import pytest

from tokensvc.core.errors import Errors
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.oauth.mappings import MappingsError, PolicyRefused, TokenPolicy, parse
from tokensvc.oauth.refusals import OAuthRefusal
from tokensvc.oauth.validator import VerifiedToken

K8S = "https://kubernetes.default.svc"
FILE = f'''
[[issuer]]
issuer = "{K8S}"
jwks_file = "/etc/jwks.json"
audience = "tokensvc"

[[mapping]]
name = "etl"
issuer = "{K8S}"
subject = "system:serviceaccount:payments:etl"
principal = "User:payments-etl"
max_token_lifetime_ms = 3600000
labels = {{ namespace = "payments" }}

[[mapping]]
name = "any-sa"
issuer = "{K8S}"
subject_pattern = "system:serviceaccount:(?P<ns>[a-z-]+):(?P<sa>[a-z-]+)"
scopes = ["kafka"]
claims = {{ azp = "kubelet" }}
principal = "User:{{ns}}-{{sa}}"
labels = {{ namespace = "{{ns}}", serviceaccount = "{{sa}}" }}
create_for_other_owners = true
'''


def token(subject: str, issuer: str = K8S, scopes: tuple[str, ...] = (), **claims) -> VerifiedToken:
    return VerifiedToken(issuer, subject, frozenset(scopes), 1, 0, "j", "k", claims)


def test_the_first_matching_mapping_wins():
    identity = parse(FILE).resolve(token("system:serviceaccount:payments:etl"))
    assert identity.principal == KafkaPrincipal.user("payments-etl")
    assert identity.mapping == "etl"
    assert identity.policy == TokenPolicy(3_600_000, (("namespace", "payments"),), False)


def test_pattern_groups_fill_principal_and_labels():
    identity = parse(FILE).resolve(token("system:serviceaccount:billing:report", scopes=("kafka",),
                                         azp="kubelet"))
    assert identity.principal == KafkaPrincipal.user("billing-report")
    assert dict(identity.policy.labels) == {"namespace": "billing", "serviceaccount": "report"}
    assert identity.policy.create_for_other_owners


@pytest.mark.parametrize("tok", [
    token("system:serviceaccount:billing:report", azp="kubelet"),  # no scope
    token("system:serviceaccount:billing:report", scopes=("kafka",), azp="other"),  # claim
    token("system:serviceaccount:payments:etl", issuer="https://other"),  # issuer
    token("someone"),
])
def test_no_match_is_refused_naming_issuer_and_subject(tok):
    with pytest.raises(OAuthRefusal) as caught:
        parse(FILE).resolve(tok)
    assert caught.value.reason == "no_mapping"
    assert tok.issuer in caught.value.message and tok.subject in caught.value.message


def test_a_list_claim_matches_when_it_holds_the_value():
    identity = parse(FILE).resolve(token("system:serviceaccount:a:b", scopes=("kafka",),
                                         azp=["x", "kubelet"]))
    assert identity.principal.name == "a-b"


@pytest.mark.parametrize("text,where", [
    ("[[mapping]]\nissuer='i'\nsubject='s'\n", "principal is required"),
    ("[[mapping]]\nissuer='i'\nprincipal='User:x'\n", "exactly one of subject"),
    ("[[mapping]]\nissuer='i'\nsubject='s'\nprincipal='Group:x'\n", "User: principal"),
    ("[[mapping]]\nissuer='i'\nsubject='s'\nprincipal='User:{x}'\n", "{x} is not a named group"),
    ("[[mapping]]\nissuer='i'\nsubject_pattern='('\nprincipal='User:x'\n", "regular expression"),
    ("[[mapping]]\nissuer='i'\nsubject='s'\nprincipal='User:x'\nmax_token_lifetime_ms=0\n",
     "max_token_lifetime_ms"),
    ("[[mapping]]\nissuer='i'\nsubject='s'\nprincipal='User:x'\nlabels={Bad='v'}\n", "label"),
    ("[[mapping]]\nissuer='i'\nsubject='s'\nprincipal='User:x'\ncolour='red'\n", "colour"),
    ("[[issuer]]\nissuer='i'\n", "exactly one of jwks_file and jwks_url"),
    ("[[issuer]]\nissuer='i'\njwks_file='f'\n[[issuer]]\nissuer='i'\njwks_file='g'\n", "twice"),
    ("[users]\n", "unknown table"),
    ("not toml [", "not valid TOML"),
])
def test_invalid_files_name_the_table_and_key(text, where):
    with pytest.raises(MappingsError, match="mappings file") as caught:
        parse(text)
    assert where in str(caught.value)


def test_policy_caps_the_lifetime_and_default_requests():
    policy = TokenPolicy(1000)
    me = KafkaPrincipal.user("me")
    assert policy.apply(me, me, 5000, ())[0] == 1000
    assert policy.apply(me, me, -1, ())[0] == 1000
    assert policy.apply(me, me, 500, ())[0] == 500
    assert TokenPolicy().apply(me, me, -1, ())[0] == -1


def test_policy_labels_win_over_the_requests():
    policy = TokenPolicy(labels=(("namespace", "payments"),))
    me = KafkaPrincipal.user("me")
    _, labels = policy.apply(me, me, -1, (("job", "x"), ("namespace", "spoof")))
    assert labels == (("job", "x"), ("namespace", "payments"))


def test_policy_refuses_other_owners_unless_allowed():
    me, other = KafkaPrincipal.user("me"), KafkaPrincipal.user("other")
    with pytest.raises(PolicyRefused) as caught:
        TokenPolicy().apply(me, other, -1, ())
    assert caught.value.error == Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED
    assert TokenPolicy(create_for_other_owners=True).apply(me, other, -1, ())[0] == -1
