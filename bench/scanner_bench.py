"""Chain scanner benchmark against a real anvil: a catch-up of 10,000 blocks.

    .venv/bin/python bench/scanner_bench.py [--addresses 1000] [--transfers 10000]
                                            [--blocks 10000] [--per-block 50]

An anvil of its own (port 8748) gets --transfers transfers (half native coin, half
ERC-20 `transfer` calls, 50 a block with automine off) into --addresses deposit addresses
registered in the stack's Postgres under a network of the bench's own (SCANBENCH), with
empty blocks mined between them (anvil_mine) so the range is --blocks blocks. Then, in
the same run, over the same range and the same range size (PAYSTREAM_SCANNER_RANGE_BLOCKS):
  scanner   the production pass (finality.scan_service's ChainScanner, built by
            scanner_for from the network's settings) catching up from a cursor set
            before the first transfer: blocks, logs and receipts read, events written
            through the outbox, cursor moved, one transaction a range, until caught up
  naive     what a scan asking per address calls, per range: one eth_getLogs filtered
            by the address as Transfer recipient and one eth_getBalance per address
            (what tells it native coin arrived); the range's full blocks where a balance
            rose (here: every range) to find those transfers, the receipts of the blocks
            paying us, decimals() once. Its requests are batched like the scanner's. It
            writes nothing: its time is the RPC time only.
Both must find the same transfers (the scanner's from the database). Requests are
JSON-RPC requests (a batch counts each one it carries), counted on the provider. The
bench's addresses and cursor are deleted afterwards; its events stay, like every bench's.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import structlog
from web3 import Web3

from paystream.finality import settings as finality_settings
from paystream.finality.evidence import TRANSFER_TOPIC
from paystream.finality.rpc import ChainRpc
from paystream.finality.scanner.blocks import DECIMALS_CALL, ranges
from paystream.finality.scanner.service import scanner_for
from paystream.finality.scanner.settings import ScannerSettings, ScanSettings
from paystream.schema.chain import deposit_event_id
from paystream.schema.db import connect, database_url
from tests.support.chain.counting import RpcCounter
from tests.support.chain.node import Chain, Token, running_anvil

PORT = 8748
NETWORK = "SCANBENCH"
SEND_BATCH = 200
TARGET_RATIO = 20.0
TARGET_SECONDS = 60.0


def address(seed: str) -> str:
    return "0x" + hashlib.sha256(seed.encode()).hexdigest()[:40]


def register(run: str, addresses: Sequence[str], cursor_block: int, cursor_hash: str) -> None:
    """The deposit addresses (a user each) and the cursor the scanner catches up from."""
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            users = [(f"{run}-u{i}",) for i in range(len(addresses))]
            cur.executemany("INSERT INTO users (user_id) VALUES (%s) ON CONFLICT DO NOTHING",
                            users)
            cur.executemany("INSERT INTO deposit_addresses (network, address, user_id)"
                            " VALUES (%s, %s, %s)",
                            [(NETWORK, a, u[0]) for a, u in zip(addresses, users, strict=True)])
            cur.execute("INSERT INTO chain_scan_cursors (network, block_number, block_hash)"
                        " VALUES (%s, %s, %s) ON CONFLICT (network) DO UPDATE"
                        " SET block_number = EXCLUDED.block_number,"
                        " block_hash = EXCLUDED.block_hash",
                        (NETWORK, cursor_block, cursor_hash))
    finally:
        conn.close()


def cleanup(addresses: Sequence[str]) -> None:
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            cur.execute("DELETE FROM deposit_addresses WHERE network = %s AND address = ANY(%s)",
                        (NETWORK, list(addresses)))
            cur.execute("DELETE FROM chain_scan_cursors WHERE network = %s", (NETWORK,))
    finally:
        conn.close()


def recorded(run: str) -> tuple[set[str], int]:
    """The scanner's events of this run, and the cursor's block."""
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT event_id FROM payment_events WHERE user_id LIKE %s"
                        " AND provider = 'scanner'", (f"{run}-u%",))
            ids = {row[0] for row in cur.fetchall()}
            cur.execute("SELECT block_number FROM chain_scan_cursors WHERE network = %s",
                        (NETWORK,))
            row = cur.fetchone()
            return ids, -1 if row is None else int(row[0])
    finally:
        conn.close()


def mine_transfers(chain: Chain, token: Token, addresses: Sequence[str], transfers: int,
                   blocks: int, per_block: int, salt: int) -> None:
    """`transfers` transfers, `per_block` a block, spread over exactly `blocks` blocks."""
    rounds = -(-transfers // per_block)
    gap = blocks // rounds
    if gap < 1 or rounds * gap != blocks:
        raise SystemExit(f"--blocks {blocks} must be a multiple of the {rounds} blocks "
                         "holding transfers")
    senders = chain.accounts[1:]
    # Explicit nonces: anvil handles a JSON-RPC batch of sends concurrently.
    nonces = {a: int(chain.rpc("eth_getTransactionCount", a, "pending"), 16)
              for a in [chain.funder, *senders]}

    def nonce(sender: str) -> str:
        nonces[sender] += 1
        return hex(nonces[sender] - 1)

    chain.set_automine(False)
    try:
        sent = 0
        for _ in range(rounds):
            calls: list[tuple[str, list[Any]]] = []
            for _ in range(min(per_block, transfers - sent)):
                to = addresses[sent % len(addresses)]
                amount = 1_000 + salt + sent
                if sent % 2:
                    data = token.contract.encode_abi(
                        "transfer", [Web3.to_checksum_address(to), amount])
                    calls.append(("eth_sendTransaction", [{
                        "from": chain.funder, "to": token.address, "data": data,
                        "gas": hex(80_000), "nonce": nonce(chain.funder)}]))
                else:
                    sender = senders[sent % len(senders)]
                    calls.append(("eth_sendTransaction", [{
                        "from": sender, "to": to, "value": hex(10**12 + amount),
                        "gas": hex(21_000), "nonce": nonce(sender)}]))
                sent += 1
            for start in range(0, len(calls), SEND_BATCH):
                chain.batch(calls[start:start + SEND_BATCH])
            chain.rpc("evm_mine")
            if gap > 1:
                chain.mine(gap - 1)
    finally:
        chain.set_automine(True)


def batched(rpc: ChainRpc, calls: list[tuple[str, list[Any]]]) -> list[Any]:
    """Requests in JSON-RPC batches of the client's batch size, as the scanner sends."""
    answers: list[Any] = []
    provider = rpc.w3.provider
    for start in range(0, len(calls), rpc.batch_size):
        for response in provider.make_batch_request(calls[start:start + rpc.batch_size]):
            if "error" in response:
                raise RuntimeError(f"naive scan: {response['error']}")
            answers.append(response.get("result"))
    return answers


def naive_scan(rpc: ChainRpc, addresses: Sequence[str], first: int, last: int,
               range_blocks: int) -> set[str]:
    """The event ids a per-address scan finds over first..last (see the docstring)."""
    found: set[str] = set()
    ours = set(addresses)
    decimals_read = False
    for lo, hi in ranges(first, last, range_blocks):
        span = {"fromBlock": hex(lo), "toBlock": hex(hi)}
        calls: list[tuple[str, list[Any]]] = []
        for a in addresses:
            calls.append(("eth_getLogs", [{**span, "topics": [
                TRANSFER_TOPIC, None, "0x" + "0" * 24 + a[2:]]}]))
            # At the range's end, it would be: anvil keeps no state that far back, so
            # `latest`, one a range per address all the same.
            calls.append(("eth_getBalance", [a, "latest"]))
        answers = batched(rpc, calls)
        for logs in answers[::2]:
            for log in logs:
                found.add(deposit_event_id(NETWORK, log["transactionHash"].lower(),
                                           log_index=int(log["logIndex"], 16)))
            if logs and not decimals_read:
                rpc.call(logs[0]["address"], DECIMALS_CALL)
                decimals_read = True
        # Every range here holds native transfers into our addresses: a balance-driven
        # scan reads each range's blocks to find them, then the receipts of the blocks
        # paying us (as the scanner does).
        blocks = batched(rpc, [("eth_getBlockByNumber", [hex(n), True])
                               for n in range(lo, hi + 1)])
        natives = {tx["hash"].lower(): int(block["number"], 16) for block in blocks
                   for tx in block["transactions"]
                   if (tx.get("to") or "").lower() in ours and int(tx["value"], 16)}
        paying = sorted(set(natives.values()))
        for receipts in batched(rpc, [("eth_getBlockReceipts", [hex(n)]) for n in paying]):
            found.update(deposit_event_id(NETWORK, r["transactionHash"].lower())
                         for r in receipts
                         if r["transactionHash"].lower() in natives
                         and int(r["status"], 16) == 1)
    return found


def scan_settings(url: str) -> ScanSettings:
    """The network's settings as `paystream consume scanner` reads them."""
    [chain] = finality_settings.from_env({**os.environ, f"ETH_RPC_URL_{NETWORK}": url},
                                         networks=(NETWORK,))
    own = ScannerSettings.from_env()
    return ScanSettings(chain=chain, poll_seconds=own.poll_seconds,
                        range_blocks=own.range_blocks, rewind_blocks=own.rewind_blocks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--addresses", type=int, default=1_000)
    parser.add_argument("--transfers", type=int, default=10_000)
    parser.add_argument("--blocks", type=int, default=10_000)
    parser.add_argument("--per-block", type=int, default=50)
    args = parser.parse_args()
    # The scanner logs each range's event ids at info: 10,000 ids are not a report.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    run = f"scanbench-{os.getpid()}-{int(time.time())}"
    addresses = [address(f"{run}-{i}") for i in range(args.addresses)]
    print(f"scanner bench: {args.addresses} addresses, {args.transfers} transfers "
          f"({args.per_block} a block) over {args.blocks} blocks, anvil on :{PORT}")
    with running_anvil(PORT, name="anvil-bench-scanner") as chain:
        token = chain.deploy_token("PUSD", decimals=6)
        start = chain.head()
        register(run, addresses, start, chain.block(start)["hash"])
        try:
            began = time.perf_counter()
            mine_transfers(chain, token, addresses, args.transfers, args.blocks,
                           args.per_block, salt=int(time.time()) % 100_000)
            target = chain.finalize(start + args.blocks)
            print(f"  mined blocks {start + 1}..{target} in "
                  f"{time.perf_counter() - began:.1f} s")
            settings = scan_settings(chain.url)
            scanner = scanner_for(settings)
            counter = RpcCounter(scanner.rpc)
            began = time.perf_counter()
            passes = 0
            while scanner.scan_once() + scanner.backfill_once():
                passes += 1
            scan_s = time.perf_counter() - began
            scanner.store.close()
            ids, cursor = recorded(run)
            blocks = target - start

            naive_rpc = ChainRpc(NETWORK, chain.url, timeout=30,
                                 batch_size=scanner.rpc.batch_size)
            naive_counter = RpcCounter(naive_rpc)
            began = time.perf_counter()
            naive_ids = naive_scan(naive_rpc, addresses, start + 1, target,
                                   settings.range_blocks)
            naive_s = time.perf_counter() - began
        finally:
            cleanup(addresses)
    if cursor != target or len(ids) != args.transfers or ids != naive_ids:
        print(f"  DISAGREE: cursor {cursor} (target {target}), scanner {len(ids)} events,"
              f" naive {len(naive_ids)}, in common {len(ids & naive_ids)}")
        return 1
    s_calls, n_calls = counter.total, naive_counter.total
    ratio = n_calls / s_calls
    print(f"  both found the {len(ids)} transfers; range {settings.range_blocks} blocks, "
          f"{passes} passes")
    print(f"  scanner: {s_calls:>7} requests ({s_calls / blocks:.2f} a block) in "
          f"{counter.round_trips:>5} round trips, {scan_s:6.1f} s, "
          f"{blocks / scan_s:,.0f} blocks/s  {dict(counter.requests)}")
    print(f"  naive  : {n_calls:>7} requests ({n_calls / blocks:.2f} a block) in "
          f"{naive_counter.round_trips:>5} round trips, {naive_s:6.1f} s (RPC only), "
          f"{blocks / naive_s:,.0f} blocks/s  {dict(naive_counter.requests)}")
    caught_up = blocks * TARGET_SECONDS / args.blocks
    print(f"  RPC requests: {ratio:.1f}x fewer than the naive scan (target >= "
          f"{TARGET_RATIO:g}x: {'met' if ratio >= TARGET_RATIO else 'NOT met'})")
    print(f"  catch-up of {blocks} blocks: {scan_s:.1f} s (target <= {caught_up:.0f} s: "
          f"{'met' if scan_s <= caught_up else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
