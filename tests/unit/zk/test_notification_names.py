"""Notification names in sequence order without parsing each one
(:meth:`zk.notifications.NotificationRoot.sorted_children` and ``after``)."""

from __future__ import annotations

import random

from zk.notifications import NotificationRoot

ROOT = NotificationRoot("tokens", "/delegation_token/token_changes", "token_change_")


def test_valid_names_come_back_in_sequence_order_and_others_are_dropped() -> None:
    sequences = list(range(0, 30_000, 7)) + [9_999_999_999]
    names = [ROOT.child(s) for s in sequences]
    noise = ["token_change_12", "token_change_00000000x1", "other_0000000001",
             "token_change_00000000011", "token_change_" + "\u0661" * 10, ""]
    mixed = names + noise
    random.Random(5).shuffle(mixed)
    assert ROOT.sorted_children(mixed) == names
    assert [ROOT.sequence(n) for n in ROOT.sorted_children(mixed)] == sequences


def test_after_gives_the_names_above_a_sequence_with_their_numbers() -> None:
    names = [ROOT.child(s) for s in (3, 10, 11, 250, 1_000_000)]
    assert ROOT.after(names, -1) == [(3, names[0]), (10, names[1]), (11, names[2]),
                                     (250, names[3]), (1_000_000, names[4])]
    assert ROOT.after(names, 10) == [(11, names[2]), (250, names[3]), (1_000_000, names[4])]
    assert ROOT.after(names, 12) == [(250, names[3]), (1_000_000, names[4])]
    assert ROOT.after(names, 1_000_000) == []
    assert ROOT.after([], 5) == []


def test_fresh_sorts_only_the_names_above_a_sequence_of_an_unsorted_listing() -> None:
    sequences = list(range(0, 5_000, 3))
    names = [ROOT.child(s) for s in sequences]
    noise = ["token_change_12", "token_change_99999999999", "other_0000009999",
             "token_change_000000x999", "zzz"]
    mixed = names + noise
    random.Random(7).shuffle(mixed)
    assert ROOT.fresh(mixed, -1) == [(s, ROOT.child(s)) for s in sequences]
    assert ROOT.fresh(mixed, 4_500) == [(s, ROOT.child(s)) for s in sequences if s > 4_500]
    assert ROOT.fresh(mixed, 4_501) == ROOT.fresh(mixed, 4_500)  # 4,501 is not listed
    assert ROOT.fresh(mixed, 4_998) == []
    assert ROOT.fresh(iter(mixed), 0) == [(s, ROOT.child(s)) for s in sequences[1:]]
    assert ROOT.fresh([], 5) == []
