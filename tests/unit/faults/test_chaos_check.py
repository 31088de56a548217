"""The fault suite's end-state rules (faults.chaos_check), on hand-made ledgers: no I/O."""

from __future__ import annotations

from faults.chaos_check import (
    Attempt,
    ControllerSample,
    RevocationRound,
    WriteLedger,
    check_writes,
    controller_overlaps,
    late_acceptances,
    latest_acceptance_s,
)


def _ledger_with(*token_ids: str) -> WriteLedger:
    ledger = WriteLedger()
    for n, token_id in enumerate(token_ids):
        ledger.sent("create")
        ledger.answered("create", "NONE", 5.0)
        ledger.created(token_id, bytes([n]) * 32, 10_000)
    return ledger


def _rules(violations: list) -> list[str]:
    return [v.rule for v in violations]


def test_every_acknowledged_token_in_zookeeper_is_no_violation() -> None:
    ledger = _ledger_with("a", "b")
    assert check_writes(ledger, {"a": 1, "b": 1}, {"a", "b"}) == []


def test_an_acknowledged_create_missing_from_zookeeper_is_a_lost_write() -> None:
    ledger = _ledger_with("a", "b")
    violations = check_writes(ledger, {"a": 1}, {"a"})
    assert _rules(violations) == ["write lost"]
    assert violations[0].token_id == "b"


def test_a_token_whose_expiry_was_sent_without_an_answer_may_be_gone() -> None:
    ledger = _ledger_with("a")
    ledger.expire_sending(ledger.tokens["a"])
    ledger.sent("expire")
    ledger.lost_answer("expire")
    assert check_writes(ledger, {}, set()) == []
    assert check_writes(ledger, {"a": 1}, {"a"}) == []


def test_an_acknowledged_expiry_whose_token_is_still_in_zookeeper_is_a_lost_expiry() -> None:
    ledger = _ledger_with("a")
    ledger.expire_sending(ledger.tokens["a"])
    ledger.expired(ledger.tokens["a"])
    assert _rules(check_writes(ledger, {"a": 1}, {"a"})) == ["expiry lost"]
    assert check_writes(ledger, {}, set()) == []


def test_an_expiry_in_zookeeper_before_an_acknowledged_renewal_is_a_lost_renew() -> None:
    ledger = _ledger_with("a")
    ledger.renewed(ledger.tokens["a"], 5_000)
    ledger.renewed(ledger.tokens["a"], 4_000)  # answers may arrive out of order
    assert _rules(check_writes(ledger, {"a": 4_999}, {"a"})) == ["renew lost"]
    assert check_writes(ledger, {"a": 5_000}, {"a"}) == []


def test_a_token_id_acknowledged_twice_is_a_duplicate() -> None:
    ledger = _ledger_with("a", "a")
    violations = check_writes(ledger, {"a": 1}, {"a"})
    assert _rules(violations) == ["duplicate"]
    assert "2 times" in violations[0].detail


def test_an_hmac_acknowledged_for_two_tokens_is_a_duplicate() -> None:
    ledger = WriteLedger()
    ledger.created("a", b"x" * 32, 1)
    ledger.created("b", b"x" * 32, 1)
    assert _rules(check_writes(ledger, {"a": 1, "b": 1}, {"a", "b"})) == ["duplicate"]


def test_new_tokens_nobody_was_given_beyond_the_unanswered_creates_are_duplicates() -> None:
    ledger = _ledger_with("a")
    ledger.sent("create")
    ledger.lost_answer("create")          # may have landed: explains one extra token
    zookeeper = {"a": 1, "x": 1}
    assert check_writes(ledger, zookeeper, set(zookeeper)) == []
    zookeeper["y"] = 1
    violations = check_writes(ledger, zookeeper, set(zookeeper))
    assert _rules(violations) == ["duplicate"]
    assert "2 new tokens" in violations[0].detail


def test_a_create_answered_request_timed_out_may_have_landed_but_another_error_not() -> None:
    ledger = _ledger_with("a")
    ledger.sent("create")
    ledger.answered("create", "REQUEST_TIMED_OUT", 10_000.0)
    assert check_writes(ledger, {"a": 1, "x": 1}, {"a", "x"}) == []
    other = _ledger_with("a")
    other.sent("create")
    other.answered("create", "NOT_CONTROLLER", 3.0)
    assert _rules(check_writes(other, {"a": 1, "x": 1}, {"a", "x"})) == ["duplicate"]


def test_tokens_older_than_the_fault_are_not_counted_as_new() -> None:
    ledger = _ledger_with("a")
    assert check_writes(ledger, {"a": 1, "old": 1}, {"a"}) == []


def test_the_ledger_counts_writes_and_keeps_the_fastest_error() -> None:
    ledger = _ledger_with("a")
    for elapsed in (300.0, 49.0, 120.0):
        ledger.sent("renew")
        ledger.answered("renew", "REQUEST_TIMED_OUT", elapsed)
    ledger.sent("expire")
    ledger.lost_answer("expire")
    assert ledger.writes(ledger.attempted) == 5
    assert ledger.writes(ledger.acknowledged) == 1
    assert ledger.writes(ledger.unknown) == 1
    assert ledger.error_count() == 3
    assert ledger.fastest_error_ms[("renew", "REQUEST_TIMED_OUT")] == 49.0


def test_a_revocation_round_counts_every_success_as_a_violation() -> None:
    rnd = RevocationRound(victim=2, pause_s=5.0, queued=10, queued_succeeded=1, fresh=40,
                          fresh_succeeded=3)
    rnd.success(0.05)
    rnd.success(0.18)
    rnd.success(0.10)
    assert rnd.violations == 4
    assert rnd.last_success_after_resume_s == 0.18
    assert RevocationRound(victim=2, pause_s=5.0, queued=10, fresh=40).violations == 0


# -- the partition suite's rules ---------------------------------------------------------


def test_a_revoked_credential_accepted_within_the_bound_is_allowed_and_later_is_not() -> None:
    acked = {"token t1": 100.0, "user u deleted": 101.0}
    attempts = [
        Attempt("token t1", 2, 99.0, True),     # before the revocation
        Attempt("token t1", 2, 103.9, True),    # within the 4 s bound
        Attempt("token t1", 2, 104.5, False),   # refused: fine at any time
        Attempt("user u deleted", 1, 105.5, True),  # 4.5 s after: late
        Attempt("token t2", 3, 200.0, True),    # never revoked
    ]
    late = late_acceptances(attempts, acked, 4.0)
    assert [(v.rule, v.token_id) for v in late] == [
        ("revoked credential accepted late", "user u deleted")]
    assert "broker 1" in late[0].detail and "4.50s" in late[0].detail
    assert latest_acceptance_s(attempts, acked) == 4.5
    assert latest_acceptance_s([Attempt("token t1", 1, 101.0, False)], acked) is None


def test_two_brokers_acting_as_controller_in_one_sample_is_a_violation() -> None:
    samples = [
        ControllerSample(0.0, {1: 1, 2: 0, 3: 0}, 1),
        ControllerSample(0.25, {1: None, 2: 0, 3: 0}, 1),   # cut: metrics unreadable
        ControllerSample(0.5, {1: 0, 2: 1, 3: 0}, 2),       # handover
        ControllerSample(0.75, {1: 1, 2: 1, 3: 0}, 2),      # the old one acts again
    ]
    violations = controller_overlaps(samples)
    assert [v.rule for v in violations] == ["two controllers"]
    assert violations[0].token_id == "1,2"


def test_a_broker_acting_while_zookeeper_names_another_counts_only_when_it_lasts() -> None:
    straddling = [ControllerSample(0.0, {1: 1, 2: 0}, 2), ControllerSample(0.25, {1: 0, 2: 1}, 2)]
    assert controller_overlaps(straddling) == []
    lasting = [ControllerSample(0.0, {1: 1, 2: 0}, 2), ControllerSample(0.25, {1: 1, 2: 0}, 2)]
    assert [v.rule for v in controller_overlaps(lasting)] == [
        "controller not the one ZooKeeper names"]


def test_the_ledger_keeps_the_slowest_answer_and_unanswered_requests() -> None:
    ledger = WriteLedger()
    ledger.answered("create", "NONE", 5.0)
    ledger.answered("create", "REQUEST_TIMED_OUT", 10_002.0)
    ledger.answered("create", "NONE", 7.0)
    ledger.lost_answer("renew", hung=True)
    ledger.lost_answer("renew")
    assert ledger.slowest_ms == {"create": 10_002.0}
    assert ledger.hung == {"renew": 1}
    assert ledger.unknown == {"renew": 2}
