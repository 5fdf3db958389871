"""The account kinds, each declared once (schema/accounts.py): looked up and walked as
the enum they replace was, and a kind a test declares is one of them until retracted."""

from __future__ import annotations

import pickle

import pytest

from paystream.schema.accounts import USER_KINDS, AccountKind, declare_kind, retract_kind


def test_the_shipped_kinds_in_their_check_order_each_a_str() -> None:
    assert [k.value for k in AccountKind] == [
        "available", "pending", "held", "custody", "settlement", "fees", "receivable",
        "opening", "adjustments"]
    assert [k for k in AccountKind if k.is_user] == list(USER_KINDS)
    assert AccountKind("fees") is AccountKind.FEES == "fees"
    assert pickle.loads(pickle.dumps(AccountKind.HELD)) is AccountKind.HELD
    with pytest.raises(ValueError, match="not a declared account kind"):
        AccountKind("rewards")
    with pytest.raises(AttributeError, match="fixed where it is declared"):
        AccountKind.FEES.is_user = True


def test_a_kind_declared_later_is_found_until_it_is_retracted() -> None:
    rewards = declare_kind("rewards")
    try:
        assert AccountKind("rewards") is rewards is AccountKind.REWARDS
        assert list(AccountKind)[-1] is rewards and not rewards.is_user
        with pytest.raises(AssertionError, match="declared twice"):
            declare_kind("rewards")
    finally:
        retract_kind(rewards)
    assert "rewards" not in [k.value for k in AccountKind]
    assert not hasattr(AccountKind, "REWARDS")
