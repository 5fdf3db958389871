"""Ledger planning of chain deposits (docs/finality.md): held in `pending` until the watcher's
settlement moves them to available (deposit_finalized) or releases them (deposit_reorged);
withdrawals spend available funds only."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from paystream.consumers.failures import PoisonError
from paystream.consumers.ledger.plan import Outcome, effects, plan_batch, read_event
from paystream.consumers.records import Origin, Record
from paystream.finality.evidence import BlockRef
from paystream.finality.store import settlement_wire, transfer_key
from paystream.finality.verify import ChainOutcome, FinalityVerdict, reorged
from paystream.schema.accounts import AccountKind, AccountRef
from paystream.schema.chain import ExpectedDeposit
from paystream.schema.events import EventError, SettlementType, parse_wire

NET = "ETH_MAINNET"
TX = "0x" + "ab" * 32
ASSET = f"{NET}:native"
CHAIN = {"network": NET, "category": "external", "tx_hash": TX, "block_number": 100,
         "raw_value": hex(15 * 10**17), "decimals": 18, "recipient": "0x" + "11" * 20,
         "sender": "0x" + "22" * 20, "removed": False}
DEPOSIT_ID = f"{NET}:{TX}:external"
NETWORKS = {DEPOSIT_ID: NET}  # what the ledger reads from chain_deposits
PENDING = AccountRef(AccountKind.PENDING, "u", ASSET)
AVAILABLE = AccountRef(AccountKind.AVAILABLE, "u", ASSET)
CUSTODY = AccountRef(AccountKind.CUSTODY, NET, ASSET)
_offset = 0


def rec(body: dict) -> Record:
    global _offset
    _offset += 1
    headers = {"event_id": body["event_id"], "event_type": body["event_type"],
               "trace_id": "t"}
    return Record(Origin("t", 0, _offset), body["user_id"].encode(),
                  json.dumps(body).encode(),
                  tuple((k, v.encode()) for k, v in headers.items()), None)


def chain_deposit(amount: str = "1.5", chain: dict | None = None) -> Record:
    return rec({"event_id": DEPOSIT_ID, "event_type": "deposit", "user_id": "u",
                "asset": ASSET, "amount": amount, "provider": "alchemy",
                "chain": chain or CHAIN})


def settlement(verdict: FinalityVerdict, amount: str = "1.5") -> Record:
    deposit = ExpectedDeposit.from_chain(DEPOSIT_ID, CHAIN)
    return rec(settlement_wire(deposit, verdict, "u", ASSET, Decimal(amount)))


FINAL = FinalityVerdict(ChainOutcome.FINAL, block=BlockRef(100, "0x" + "cd" * 32))


def plain(event_type: str, amount: str, event_id: str) -> Record:
    return rec({"event_id": event_id, "event_type": event_type, "user_id": "u",
                "asset": ASSET, "amount": amount, "provider": "payments"})


def test_a_chain_deposit_is_pending_and_funds_nothing() -> None:
    batch = [read_event(chain_deposit()), read_event(plain("withdrawal", "1", "w1"))]
    plan = plan_batch(batch, {})
    assert [o for _, o in plan.decisions] == [Outcome.PENDING_FINALITY,
                                              Outcome.INSUFFICIENT_FUNDS]
    assert plan.sorted_deltas() == []
    assert plan.sorted_pending_deltas() == [(("u", ASSET), Decimal("1.5"))]
    # The deposit addresses of the network hold it: custody is its other side.
    assert [moved for _, moved in plan.transfers] == [[(PENDING, Decimal("1.5")),
                                                       (CUSTODY, Decimal("-1.5"))]]


def test_finalisation_moves_pending_to_available_and_funds_a_later_withdrawal() -> None:
    batch = [read_event(settlement(FINAL)), read_event(plain("withdrawal", "1", "w2"))]
    plan = plan_batch(batch, {}, networks=NETWORKS)
    assert [o for _, o in plan.decisions] == [Outcome.APPLIED, Outcome.APPLIED]
    assert plan.sorted_deltas() == [(("u", ASSET), Decimal("0.5"))]
    assert plan.sorted_pending_deltas() == [(("u", ASSET), Decimal("-1.5"))]
    settlement_account = AccountRef(AccountKind.SETTLEMENT, "payments", ASSET)
    assert [moved for _, moved in plan.transfers] == [
        [(PENDING, Decimal("-1.5")), (AVAILABLE, Decimal("1.5"))],
        [(AVAILABLE, Decimal(-1)), (settlement_account, Decimal(1))]]
    assert plan.closing[("u", ASSET)] == Decimal("0.5")


def test_a_reorg_releases_pending_and_credits_nothing() -> None:
    c = read_event(settlement(reorged("tx_not_in_chain")))
    plan = plan_batch([c], {("u", ASSET): Decimal(7)}, networks=NETWORKS)
    assert plan.decisions[0][1] is Outcome.REORGED
    assert plan.sorted_deltas() == []
    assert plan.sorted_pending_deltas() == [(("u", ASSET), Decimal("-1.5"))]
    assert plan.closing[("u", ASSET)] == Decimal(7)
    # The chain took it back: out of custody again.
    assert plan.transfers[0][1] == [(PENDING, Decimal("-1.5")), (CUSTODY, Decimal("1.5"))]


def test_pending_deposit_then_its_finalisation_in_one_batch_nets_pending_to_zero() -> None:
    plan = plan_batch([read_event(chain_deposit()), read_event(settlement(FINAL))], {},
                      networks=NETWORKS)
    assert plan.sorted_pending_deltas() == []  # +1.5 - 1.5: no UPDATE of pending
    assert len(plan.transfers) == 2  # but both transfers are written
    assert plan.sorted_deltas() == [(("u", ASSET), Decimal("1.5"))]


def test_settlement_ids_and_types_are_derived_from_the_deposit() -> None:
    fin, reo = read_event(settlement(FINAL)), read_event(settlement(reorged("x")))
    assert fin.event.event_id == DEPOSIT_ID + ":finalized"
    assert fin.event.event_type is SettlementType.DEPOSIT_FINALIZED
    assert reo.event.event_id == DEPOSIT_ID + ":reorged"
    assert fin.event.settles == reo.event.settles == DEPOSIT_ID
    assert fin.key != reo.key  # (event_id, event_type) differ: own idempotency keys
    assert effects(fin.event, Outcome.APPLIED) == (Decimal("1.5"), Decimal("-1.5"))


def test_settlement_wire_has_no_nulls_or_empty_lists() -> None:
    wire = json.loads(settlement(FINAL).value)
    assert None not in wire["chain"].values() and [] not in wire["chain"].values()
    assert wire["chain"]["block_number"] == 100


def test_a_settlement_without_its_deposit_id_is_poison() -> None:
    with pytest.raises(EventError):
        parse_wire({"event_id": "x:finalized", "event_type": "deposit_finalized",
                    "user_id": "u", "asset": ASSET, "amount": "1", "provider": "finality"})


def test_a_chain_deposit_with_an_unusable_identity_is_poison() -> None:
    with pytest.raises(PoisonError, match="invalid_chain_identity"):
        read_event(chain_deposit(chain={"network": NET, "category": "erc721"}))


def test_transfer_key_names_the_transfer_where_it_is_final() -> None:
    token = ExpectedDeposit.from_chain(f"{NET}:{TX}:log:0", {
        **CHAIN, "category": "token", "log_index": 0, "token_contract": "0x" + "33" * 20})
    moved = FinalityVerdict(ChainOutcome.FINAL, block=BlockRef(101, "0x" + "ee" * 32),
                            moved=True, log_index=3)
    assert transfer_key(token, moved) == f"{NET}:{TX}:log:3"
    native = ExpectedDeposit.from_chain(DEPOSIT_ID, CHAIN)
    assert transfer_key(native, FINAL) == f"{NET}:{TX}:external"
