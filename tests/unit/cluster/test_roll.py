"""The rolling restart's order (pure)."""

from tokensvc.roll import roll_order


def test_roll_order_puts_the_controller_last() -> None:
    assert roll_order([3, 1, 2], 1) == [2, 3, 1]


def test_roll_order_without_a_controller_is_by_id() -> None:
    assert roll_order([3, 1, 2], None) == [1, 2, 3]
    assert roll_order([2, 1], 7) == [1, 2]
