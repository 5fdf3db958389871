"""Credit depth: the setting, and the watcher's grace clock for a credited deposit that
goes missing at the credit height (a fake chain that only answers 'not found')."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from paystream.finality import settings
from paystream.finality.evidence import BlockRef
from paystream.finality.verify import ChainOutcome, FinalityVerdict
from paystream.finality.watcher import FinalityWatcher
from paystream.schema.chain import ExpectedDeposit
from tests.unit.test_ledger_finality_plan import CHAIN, DEPOSIT_ID

NET = "ETH_MAINNET"


def test_credit_depth_unset_means_credit_on_finality(monkeypatch) -> None:
    monkeypatch.delenv(f"PAYSTREAM_FINALITY_CREDIT_DEPTH_{NET}", raising=False)
    assert settings.from_env()[0].credit_depth is None


def test_credit_depth_per_network(monkeypatch) -> None:
    monkeypatch.setenv("PAYSTREAM_FINALITY_NETWORKS", "ETH_MAINNET,POLYGON")
    monkeypatch.setenv("PAYSTREAM_FINALITY_CREDIT_DEPTH_POLYGON", "32")
    monkeypatch.setenv("PAYSTREAM_FINALITY_CONFIRMATIONS_POLYGON", "256")
    eth, polygon = settings.from_env()
    assert (eth.credit_depth, polygon.credit_depth) == (None, 32)
    assert polygon.confirmations == 256


@pytest.mark.parametrize(("depth", "confirmations", "message"), [
    ("twelve", None, "integer"), ("0", None, ">= 1"), ("-3", None, ">= 1"),
    ("64", "64", "below the finality depth"), ("65", "64", "below the finality depth"),
])
def test_bad_credit_depth_refuses_to_start(monkeypatch, depth, confirmations,
                                           message) -> None:
    monkeypatch.setenv(f"PAYSTREAM_FINALITY_CREDIT_DEPTH_{NET}", depth)
    if confirmations:
        monkeypatch.setenv(f"PAYSTREAM_FINALITY_CONFIRMATIONS_{NET}", confirmations)
    with pytest.raises(ValueError, match=message):
        settings.from_env()


class GoneChain:
    """finalized 90, head as set; every transaction is gone (no receipt)."""

    network = NET

    def __init__(self) -> None:
        self.head_number = 102

    def finalized_block(self) -> BlockRef:
        return BlockRef(90, "0x" + "00" * 32)

    def head(self) -> int:
        return self.head_number

    def blocks_evidence(self, numbers, with_transactions):
        return {}

    def receipt(self, tx_hash):
        return None

    def transaction(self, tx_hash):
        return None


@dataclass
class CreditedStore:
    deposit: ExpectedDeposit
    missing: int | None = None
    recorded: list[tuple[str, FinalityVerdict]] = field(default_factory=list)

    def due(self, network, up_to_block, limit):
        return []

    def backlog(self, network):
        return 0, None

    def credited(self, network, limit):
        return [] if self.recorded else [(self.deposit, self.missing)]

    def mark_missing(self, network, marks):
        self.missing = marks[self.deposit.event_id]

    def record(self, network, decided: Sequence, credited: Sequence = ()) -> None:
        self.recorded += [(d.event_id, v) for d, v in credited]


def test_a_credited_deposit_missing_at_the_credit_height_is_reversed_after_the_grace() -> None:
    chain = GoneChain()
    store = CreditedStore(ExpectedDeposit.from_chain(DEPOSIT_ID, CHAIN))  # block 100
    watcher = FinalityWatcher(chain, store, store, reorg_grace_blocks=3,  # type: ignore
                              credit_depth=2)
    report = watcher.tick()  # credit height 100: gone -> the clock starts at 100
    assert (report.rechecked, report.reversed, store.missing) == (1, 0, 100)
    chain.head_number = 104  # credit height 102: 2 blocks of grace used
    assert watcher.tick().reversed == 0 and store.recorded == []
    chain.head_number = 105  # credit height 103 = 100 + 3: reversed, before finality
    assert watcher.tick().reversed == 1
    [(event_id, verdict)] = store.recorded
    assert event_id == DEPOSIT_ID
    assert (verdict.outcome, verdict.reason) == (ChainOutcome.UNCONFIRMED, "tx_not_in_chain")
