"""A chain scanner pass (finality/scanner/service.py) against an in-memory chain and cursor:
the range the node refuses is halved, the cursor moves to the last block read, a cursor
whose block hash changed is rewound, and what the pass writes is what it found."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest

from paystream.finality.evidence import TRANSFER_TOPIC, BlockEvidence, BlockRef, Receipt
from paystream.finality.rpc import RpcRejectedError, RpcUnavailableError
from paystream.finality.scanner.service import ChainScanner
from paystream.finality.scanner.store import Backfill, Written
from paystream.schema.events import PaymentEvent

NETWORK = "ETH_TEST"
ADDRESS = "0x" + "33" * 20
OTHER = "0x" + "44" * 20  # another registered address: a backfill of ADDRESS skips it
SENDER = "0x" + "22" * 20


def _hash(number: int, fork: int = 0) -> str:
    return "0x" + format(number * 1000 + fork, "064x")


class FakeChain:
    """The RPC vocabulary the scanner uses, over a chain of `length` blocks."""

    def __init__(self, length: int, *, max_log_range: int = 1000) -> None:
        self.network = NETWORK
        self.length = length
        self.max_log_range = max_log_range
        self.fork = 0
        self.transfers: dict[int, int] = {}  # block -> wei paid to ADDRESS
        self.recipients: dict[int, str] = {}  # block -> another recipient than ADDRESS
        self.log_calls: list[tuple[int, int]] = []

    def finalized_block(self) -> BlockRef:
        return BlockRef(self.length - 1, _hash(self.length - 1, self.fork))

    def head(self) -> int:
        return self.length - 1

    def block_hash(self, number: int) -> str | None:
        return _hash(number, self.fork) if number < self.length else None

    def logs(self, first: int, last: int, topics: Sequence[str | None]) -> list[Any]:
        assert list(topics) == [TRANSFER_TOPIC]
        self.log_calls.append((first, last))
        if last - first + 1 > self.max_log_range:
            raise RpcRejectedError("eth_getLogs", "query returned more than 10000 results")
        return []

    def full_blocks(self, numbers: Sequence[int]) -> list[Any]:
        return [{"number": hex(n), "hash": _hash(n, self.fork), "transactions": [
            {"hash": "0x" + format(n, "064x"), "from": SENDER,
             "to": self.recipients.get(n, ADDRESS), "value": hex(self.transfers[n])}]
            if n in self.transfers else []} for n in numbers]

    def blocks_evidence(self, numbers: Sequence[int], with_transactions: set[int]
                        ) -> dict[int, BlockEvidence]:
        found = {}
        for n in numbers:
            ref, tx = BlockRef(n, _hash(n, self.fork)), "0x" + format(n, "064x")
            found[n] = BlockEvidence(ref, {tx: Receipt(tx, n, ref.hash, 1, SENDER, ADDRESS, ())})
        return found


class FakePass:
    def __init__(self, store: FakeStore) -> None:
        self.store = store

    def cursor(self) -> BlockRef | None:
        return self.store.cursor

    def start_at(self, block: BlockRef) -> bool:
        self.store.cursor = block
        return True

    def move_to(self, block: BlockRef) -> None:
        self.store.cursor = block

    def owners(self, addresses: Sequence[str]) -> dict[str, str]:
        return {a: "u1" for a in addresses if a in (ADDRESS, OTHER)}

    def open_backfill(self) -> Backfill | None:
        return next((b for b in self.store.backfills if b.next_block <= (
            b.up_to_block if b.up_to_block is not None else 1 << 62)), None)

    def backfill_moved(self, backfill: Backfill, next_block: int, up_to_block: int) -> None:
        self.store.backfills = [replace(b, next_block=next_block, up_to_block=up_to_block)
                                if b.backfill_id == backfill.backfill_id else b
                                for b in self.store.backfills]

    def write(self, events: Sequence[PaymentEvent], trace_id: str) -> Written:
        new = [e.event_id for e in events if e.event_id not in self.store.events]
        self.store.events.update(new)
        return Written(accepted=new, known=[e.event_id for e in events if e.event_id not in new])


class FakeStore:
    def __init__(self) -> None:
        self.cursor: BlockRef | None = None
        self.events: set[str] = set()
        self.backfills: list[Backfill] = []

    @contextmanager
    def pass_for(self, network: str) -> Iterator[FakePass]:
        saved = (self.cursor, set(self.events), list(self.backfills))
        try:
            yield FakePass(self)
        except BaseException:
            self.cursor, self.events, self.backfills = saved  # a rollback
            raise


def _scanner(chain: FakeChain, store: FakeStore, **kw: Any) -> ChainScanner:
    return ChainScanner(chain, store, **kw)  # type: ignore[arg-type]


def test_first_pass_starts_at_the_target_then_each_pass_reads_one_range() -> None:
    chain, store = FakeChain(10), FakeStore()
    scanner = _scanner(chain, store, range_blocks=4)
    assert scanner.scan_once() == 0 and store.cursor == BlockRef(9, _hash(9))
    chain.length = 20
    chain.transfers[12] = 5
    assert scanner.scan_once() == 4 and store.cursor == BlockRef(13, _hash(13))
    assert store.events == {f"{NETWORK}:0x{format(12, '064x')}:external"}
    assert scanner.scan_once() == 4 and scanner.scan_once() == 2
    assert scanner.scan_once() == 0 and store.cursor.number == 19
    assert chain.log_calls == [(10, 13), (14, 17), (18, 19)]


def test_a_refused_range_is_halved_until_the_node_answers() -> None:
    chain, store = FakeChain(200, max_log_range=30), FakeStore()
    store.cursor = BlockRef(0, _hash(0))
    scanner = _scanner(chain, store, range_blocks=100)
    assert scanner.scan_once() == 25
    assert chain.log_calls == [(1, 100), (1, 50), (1, 25)]
    assert store.cursor == BlockRef(25, _hash(25))


def test_a_reorg_under_the_cursor_rewinds_and_rescans() -> None:
    chain, store = FakeChain(50), FakeStore()
    store.cursor = BlockRef(40, _hash(40))
    chain.fork = 1  # every block re-hashed: the cursor's block is gone
    chain.transfers[35] = 7  # ... and the new chain pays us below the cursor
    scanner = _scanner(chain, store, range_blocks=100, rewind_blocks=8)
    scanner.scan_once()
    assert chain.log_calls == [(32, 49)]
    assert store.cursor == BlockRef(49, _hash(49, fork=1))
    assert len(store.events) == 1


def test_a_failed_read_leaves_the_cursor_and_writes_nothing() -> None:
    chain, store = FakeChain(50), FakeStore()
    store.cursor = BlockRef(10, _hash(10))
    chain.transfers[11] = 7

    def broken(numbers: Sequence[int]) -> list[Any]:
        raise RpcUnavailableError("batch:eth_getBlockByNumber", "timed out")

    chain.full_blocks = broken  # type: ignore[method-assign]
    with pytest.raises(RpcUnavailableError):
        _scanner(chain, store).scan_once()
    assert store.cursor == BlockRef(10, _hash(10)) and store.events == set()


def test_a_backfill_reads_one_address_up_to_the_cursor_then_is_done() -> None:
    chain, store = FakeChain(40), FakeStore()
    store.cursor = BlockRef(30, _hash(30))
    chain.transfers.update({3: 5, 9: 6, 12: 7, 35: 8})
    chain.recipients[9] = OTHER  # paid to another address: not this backfill's
    store.backfills = [Backfill(1, ADDRESS, 2, None)]
    scanner = _scanner(chain, store, range_blocks=8)
    assert scanner.backfill_once() == 8  # 2..9, its end fixed at the cursor: 30
    assert store.backfills == [Backfill(1, ADDRESS, 10, 30)]
    assert store.events == {f"{NETWORK}:0x{format(3, '064x')}:external"}
    while scanner.backfill_once():
        pass
    assert store.backfills == [Backfill(1, ADDRESS, 31, 30)]  # done
    assert store.events == {f"{NETWORK}:0x{format(n, '064x')}:external" for n in (3, 12)}
    assert store.cursor == BlockRef(30, _hash(30))  # the passes' business, untouched
    # Asked again: the same transfers, already recorded, nothing new.
    store.backfills = [Backfill(2, ADDRESS, 0, None)]
    before = set(store.events)
    while scanner.backfill_once():
        pass
    assert store.events == before


def test_a_backfill_range_that_fails_moves_nothing() -> None:
    chain, store = FakeChain(40), FakeStore()
    store.cursor = BlockRef(30, _hash(30))
    store.backfills = [Backfill(1, ADDRESS, 0, None)]

    def broken(numbers: Sequence[int]) -> list[Any]:
        raise RpcUnavailableError("batch:eth_getBlockByNumber", "timed out")

    chain.full_blocks = broken  # type: ignore[method-assign]
    with pytest.raises(RpcUnavailableError):
        _scanner(chain, store).backfill_once()
    assert store.backfills == [Backfill(1, ADDRESS, 0, None)]
