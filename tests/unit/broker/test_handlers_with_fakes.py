"""Handlers against fake services and a fake clock: no broker object, no ZooKeeper.

The token handlers run Kafka's rules (the real TokenManager and TokenCache, pure) and hand
their writes to a fake write path; the envelope handler's sender check (who may send an
EnvelopeRequest at all) is exercised case by case.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from tests.support.loopturns import PerTurn
from tokensvc.broker.context import RequestContext
from tokensvc.broker.handlers import HANDLERS
from tokensvc.broker.handlers.envelope import handle_envelope, sender_refusal
from tokensvc.broker.handlers.tokens import AUDIT_SLICE, handle_create, handle_expire, handle_renew
from tokensvc.core.cache import TokenCache
from tokensvc.core.clock import FakeClock
from tokensvc.core.errors import Errors
from tokensvc.core.keys import MasterKeys
from tokensvc.core.manager import TokenManager
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.protocol import RequestHeader
from tokensvc.protocol.api import ApiKey

ALICE = KafkaPrincipal.user("alice")
BOB = KafkaPrincipal.user("bob")
HOUR = 3_600_000


class FakeTokens:
    """The token service: the real cache and manager, writes recorded (and cached)."""

    def __init__(self, clock: FakeClock) -> None:
        keys = MasterKeys("k")
        self.cache = TokenCache(keys)
        self.manager = TokenManager(keys, max_lifetime_ms=7 * 24 * HOUR, renew_period_ms=24 * HOUR,
                                    clock=clock)
        self.writes: list[tuple] = []

    def by_hmac(self, hmac):
        return self.cache.by_hmac(hmac)

    async def create(self, ctx, info):
        self.writes.append(("create", info.token_id))
        self.cache.upsert(info)

    async def update(self, ctx, info, outcome):
        self.writes.append(("update", info.token_id, outcome))
        self.cache.upsert(info)

    async def delete(self, ctx, info, outcome):
        self.writes.append(("delete", info.token_id, outcome))
        self.cache.remove(info.token_id)

    def info(self, token_id):
        return self.cache.info(token_id)

    def owned_by(self, owner):
        infos = (self.cache.info(t) for t in self.cache.ids_of([owner]))
        return [i for i in infos if i is not None and i.owner == owner]

    def selected(self, owner, selector):
        infos = (self.cache.info(t) for t in self.cache.ids_labelled(selector))
        return [i for i in infos if i is not None and (owner is None or i.owner == owner)]

    async def naming(self, owner, selector):
        return self.selected(owner, selector) if selector else self.owned_by(owner)

    def owned_count(self, owner):
        return len(self.owned_by(owner))

    def creating(self, owner, delta):
        pass

    async def revoke(self, ctx, infos):
        for info in infos:
            self.writes.append(("delete", info.token_id))
            self.cache.remove(info.token_id)
        return list(infos)

    async def record(self, ctx, outcome):
        self.writes.append(("record", outcome))


def _services(clock: FakeClock, *, cluster_action: bool = False, limit: int = 0):
    events: list[dict] = []
    return SimpleNamespace(
        config=SimpleNamespace(master_keys=MasterKeys("k"), inter_broker_listener_name="BROKER",
                               inter_broker_sasl_username="broker",
                               delegation_token_max_per_owner=limit),
        clock=clock,
        audit=SimpleNamespace(required=False, refusal=lambda: None,
                              emit=lambda kind, **f: events.append({"type": kind, **f}),
                              emit_many=lambda kind, common, rows: events.extend(
                                  {"type": kind, **common, **row} for row in rows),
                              events=events),
        metrics=SimpleNamespace(token_request=lambda action, error, count=1: None),
        authz=SimpleNamespace(authorize=lambda ctx, op, rtype, name: cluster_action,
                              allows_everything=lambda ctx: False),
        tokens=FakeTokens(clock),
    )


def _ctx(api: int, principal=ALICE, listener: str = "SASL_PLAINTEXT") -> RequestContext:
    return RequestContext(RequestHeader(api, 2, 1, "c"), principal, listener, "SASL_PLAINTEXT",
                          "127.0.0.1", 1, b"")


def _create(services) -> dict:
    body = {"Renewers": [], "MaxLifetimeMs": -1}
    return asyncio.run(handle_create(services, _ctx(38), body))


def test_create_writes_through_the_token_service_and_audits_once():
    s = _services(FakeClock())
    created = _create(s)
    assert created["ErrorCode"] == 0
    assert s.tokens.writes == [("create", created["TokenId"])]
    assert [e["action"] for e in s.audit.events] == ["create"]


def test_renew_records_its_answer_as_the_outcome_of_the_write():
    clock = FakeClock()
    s = _services(clock)
    created = _create(s)
    clock.advance(HOUR)
    renewed = asyncio.run(handle_renew(s, _ctx(39), {"Hmac": created["Hmac"], "RenewPeriodMs": HOUR}))
    assert renewed["ExpiryTimestampMs"] == clock.now_ms() + HOUR
    assert s.tokens.writes[-1] == ("update", created["TokenId"], renewed)


def test_renew_by_a_non_renewer_is_owner_mismatch_and_writes_nothing():
    s = _services(FakeClock())
    created = _create(s)
    refused = asyncio.run(handle_renew(s, _ctx(ApiKey.RENEW_DELEGATION_TOKEN, BOB), {"Hmac": created["Hmac"], "RenewPeriodMs": 1}))
    assert refused["ErrorCode"] == Errors.DELEGATION_TOKEN_OWNER_MISMATCH
    assert len(s.tokens.writes) == 1


def test_expire_now_deletes_with_the_answer_as_outcome():
    clock = FakeClock()
    s = _services(clock)
    created = _create(s)
    expired = asyncio.run(handle_expire(s, _ctx(40), {"Hmac": created["Hmac"],
                                                      "ExpiryTimePeriodMs": -1}))
    assert expired == {"ErrorCode": 0, "ExpiryTimestampMs": clock.now_ms(), "ThrottleTimeMs": 0}
    assert s.tokens.writes[-1] == ("delete", created["TokenId"], expired)
    assert s.tokens.by_hmac(created["Hmac"]) is None


def test_only_a_broker_session_on_the_inter_broker_listener_may_send_an_envelope():
    s = _services(FakeClock())
    broker = KafkaPrincipal.user("broker")
    admin_token = KafkaPrincipal("User", "admin", token_authenticated=True)
    assert sender_refusal(s, _ctx(ApiKey.ENVELOPE, broker, "BROKER")) is None
    assert sender_refusal(s, _ctx(ApiKey.ENVELOPE, broker, "SASL_PLAINTEXT")) == "client_listener"
    assert sender_refusal(s, _ctx(ApiKey.ENVELOPE, admin_token, "BROKER")) == "token_session"
    assert sender_refusal(s, _ctx(ApiKey.ENVELOPE, ALICE, "BROKER")) == "not_a_broker"
    with_action = _services(FakeClock(), cluster_action=True)
    assert sender_refusal(with_action, _ctx(ApiKey.ENVELOPE, ALICE, "BROKER")) is None
    # CLUSTER_ACTION does not make a token session a broker.
    assert sender_refusal(with_action, _ctx(ApiKey.ENVELOPE, admin_token,
                                            "BROKER")) == "token_session"


def test_the_table_routes_every_write_with_a_replay():
    writes = {key: h for key, h in HANDLERS.items() if h.write}
    assert set(writes) == {30, 31, 38, 39, 40, 51}
    assert all(h.replay is not None and h.precheck is not None for h in writes.values())


def test_a_refused_envelope_is_cluster_authorization_failed_and_audited():
    s = _services(FakeClock(), cluster_action=True)
    s.cluster = SimpleNamespace(is_controller=True)
    s.ledger = SimpleNamespace(apply=None)  # must not be reached
    admin_token = KafkaPrincipal("User", "admin", token_authenticated=True)
    answer = asyncio.run(handle_envelope(s, _ctx(ApiKey.ENVELOPE, admin_token, "BROKER"), {}))
    assert answer == {"ResponseData": None, "ErrorCode": int(Errors.CLUSTER_AUTHORIZATION_FAILED)}
    (event,) = s.audit.events
    assert (event["type"], event["api"], event["outcome"]) == ("forward", "Envelope", "failure")
    assert event["error_code"] == Errors.CLUSTER_AUTHORIZATION_FAILED


# --- the per-owner limit and revocation without HMACs ------------------------------


def test_create_beyond_the_owner_limit_is_policy_violation_and_writes_nothing():
    services = _services(FakeClock(1_000), limit=3)
    for _ in range(3):
        assert _create(services)["ErrorCode"] == 0
    refused = _create(services)
    assert refused["ErrorCode"] == Errors.POLICY_VIOLATION
    assert [w[0] for w in services.tokens.writes] == ["create"] * 3
    audited = [e for e in services.audit.events if e.get("reason") == "owner_limit"]
    assert len(audited) == 1 and audited[0]["count"] == 3


def test_passing_80_percent_of_the_limit_is_audited_once():
    services = _services(FakeClock(1_000), limit=5)
    for _ in range(5):
        _create(services)
    near = [e for e in services.audit.events if e.get("reason") == "owner_near_limit"]
    assert len(near) == 1 and near[0]["count"] == 5


def _revoke(services, principal=ALICE, **body) -> dict:
    fields = {"Hmac": b"", "ExpiryTimePeriodMs": -1, **body}
    return asyncio.run(handle_expire(services, _ctx(ApiKey.EXPIRE_DELEGATION_TOKEN, principal), fields))


def _owned(services, owner, n):
    requester = owner
    return [services.tokens.manager.create(owner, requester, [], -1) for _ in range(n)]


def test_revoke_by_owner_removes_exactly_that_owners_tokens_and_audits_each():
    services = _services(FakeClock(1_000))
    alice = _owned(services, ALICE, 3)
    bob = _owned(services, BOB, 2)
    for token in alice + bob:
        services.tokens.cache.upsert(token.info)
    answer = _revoke(services, RevokeOwner={"PrincipalType": "User", "PrincipalName": "alice"})
    assert answer["ErrorCode"] == 0
    assert {r["TokenId"] for r in answer["Revoked"]} == {t.info.token_id for t in alice}
    assert all(services.tokens.cache.by_id(t.info.token_id) for t in bob)
    assert not any(services.tokens.cache.by_id(t.info.token_id) for t in alice)
    revokes = [e for e in services.audit.events if e["action"] == "revoke"]
    assert {e["token_id"] for e in revokes} == {t.info.token_id for t in alice}
    assert {e["reason"] for e in revokes} == {"revoked_by_owner"}
    assert services.tokens.writes[-1][0] == "record"


def test_a_revocations_audit_events_are_emitted_a_slice_per_turn_of_the_loop():
    # Ten thousand events in one go held the loop; a slice between two yields is short.
    services = _services(FakeClock(1_000))
    for token in _owned(services, ALICE, 5 * AUDIT_SLICE + 3):
        services.tokens.cache.upsert(token.info)
    emitted = services.audit.events

    async def scenario():
        fields = {"Hmac": b"", "ExpiryTimePeriodMs": -1,
                  "RevokeOwner": {"PrincipalType": "User", "PrincipalName": "alice"}}
        with PerTurn(lambda: len(emitted)) as turns:
            answer = await handle_expire(services, _ctx(ApiKey.EXPIRE_DELEGATION_TOKEN, ALICE),
                                         fields)
        return answer, turns.growth

    answer, per_turn = asyncio.run(scenario())
    assert len(answer["Revoked"]) == 5 * AUDIT_SLICE + 3
    assert sum(e["action"] == "revoke" for e in emitted) == 5 * AUDIT_SLICE + 3
    assert 0 < max(per_turn) <= AUDIT_SLICE <= 64


def test_revoke_by_id_reports_unknown_ids():
    services = _services(FakeClock(1_000))
    (token,) = _owned(services, ALICE, 1)
    services.tokens.cache.upsert(token.info)
    answer = _revoke(services, RevokeTokenIds=[token.info.token_id, "no-such-token"])
    assert [r["TokenId"] for r in answer["Revoked"]] == [token.info.token_id]
    assert answer["RevokeNotFound"] == ["no-such-token"]
    only_unknown = _revoke(services, RevokeTokenIds=["no-such-token"])
    assert only_unknown["ErrorCode"] == Errors.DELEGATION_TOKEN_NOT_FOUND


def test_revoke_is_refused_as_a_whole_when_one_token_is_not_the_callers():
    services = _services(FakeClock(1_000))
    mine, = _owned(services, ALICE, 1)
    theirs, = _owned(services, BOB, 1)
    for token in (mine, theirs):
        services.tokens.cache.upsert(token.info)
    answer = _revoke(services, RevokeTokenIds=[mine.info.token_id, theirs.info.token_id])
    assert answer["ErrorCode"] == Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED
    assert services.tokens.writes == []
    assert services.tokens.cache.by_id(mine.info.token_id) is not None


def test_dry_run_lists_and_changes_nothing():
    services = _services(FakeClock(1_000))
    tokens = _owned(services, ALICE, 2)
    for token in tokens:
        services.tokens.cache.upsert(token.info)
    answer = _revoke(services, RevokeOwner={"PrincipalType": "User", "PrincipalName": "alice"},
                     RevokeDryRun=True)
    assert len(answer["Revoked"]) == 2 and services.tokens.writes == []


def _labelled(services, owner, labels, n):
    tokens = [services.tokens.manager.create(owner, owner, [], -1, labels) for _ in range(n)]
    for token in tokens:
        services.tokens.cache.upsert(token.info)
    return tokens


def test_a_create_with_bad_labels_writes_nothing_and_says_which_label():
    services = _services(FakeClock())
    body = {"Renewers": [], "MaxLifetimeMs": -1, "Labels": [{"Key": "job", "Value": ""}]}
    answer = asyncio.run(handle_create(services, _ctx(38), body))
    assert answer["ErrorCode"] == Errors.INVALID_REQUEST
    assert answer["ErrorMessage"] == "label 'job' has an empty value"
    assert services.tokens.writes == []
    (event,) = services.audit.events
    assert event["reason"] == "invalid_labels" and event["outcome"] == "failure"


def test_a_labelled_create_answers_and_audits_its_labels_an_unlabelled_one_neither():
    services = _services(FakeClock())
    body = {"Renewers": [], "MaxLifetimeMs": -1,
            "Labels": [{"Key": "team", "Value": "p"}, {"Key": "job", "Value": "etl"}]}
    answer = asyncio.run(handle_create(services, _ctx(38), body))
    assert answer["Labels"] == [{"Key": "job", "Value": "etl"}, {"Key": "team", "Value": "p"}]
    assert services.audit.events[-1]["labels"] == {"job": "etl", "team": "p"}
    plain = _create(services)
    assert plain["Labels"] is None and "labels" not in services.audit.events[-1]


def test_revoke_by_label_takes_exactly_the_matching_tokens_of_the_owner_given():
    services = _services(FakeClock(1_000))
    etl = _labelled(services, ALICE, {"job": "etl", "team": "p"}, 3)
    other_job = _labelled(services, ALICE, {"job": "ingest"}, 2)
    bobs = _labelled(services, BOB, {"job": "etl"}, 1)
    dry = _revoke(services, RevokeLabels=[{"Key": "job", "Value": "etl"}],
                  RevokeOwner={"PrincipalType": "User", "PrincipalName": "alice"},
                  RevokeDryRun=True)
    assert {r["TokenId"] for r in dry["Revoked"]} == {t.info.token_id for t in etl}
    assert services.tokens.writes == []
    answer = _revoke(services, RevokeLabels=[{"Key": "job", "Value": "etl"}],
                     RevokeOwner={"PrincipalType": "User", "PrincipalName": "alice"})
    assert {r["TokenId"] for r in answer["Revoked"]} == {t.info.token_id for t in etl}
    assert all(services.tokens.cache.by_id(t.info.token_id) for t in other_job + bobs)
    revokes = [e for e in services.audit.events if e["action"] == "revoke"]
    assert {e["reason"] for e in revokes} == {"revoked_by_label"}
    assert all(e["selector"] == {"job": "etl"} and e["labels"] == {"job": "etl", "team": "p"}
               for e in revokes)


def test_revoke_by_label_is_refused_as_a_whole_when_one_match_is_not_the_callers():
    services = _services(FakeClock(1_000))
    _labelled(services, ALICE, {"job": "etl"}, 2)
    _labelled(services, BOB, {"job": "etl"}, 1)
    answer = _revoke(services, RevokeLabels=[{"Key": "job", "Value": "etl"}])
    assert answer["ErrorCode"] == Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED
    assert len(services.tokens.cache.ids_labelled((("job", "etl"),))) == 3
    assert services.tokens.writes == []


def test_revoke_by_label_refuses_ids_too_and_a_bad_selector():
    services = _services(FakeClock(1_000))
    both = _revoke(services, RevokeLabels=[{"Key": "job", "Value": "etl"}],
                   RevokeTokenIds=["x"])
    assert both["ErrorCode"] == Errors.INVALID_REQUEST
    bad = _revoke(services, RevokeLabels=[{"Key": "Job", "Value": "etl"}])
    assert bad["ErrorCode"] == Errors.INVALID_REQUEST and "'Job'" in bad["RevokeMessage"]
