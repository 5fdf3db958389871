"""Finality benchmark against a real anvil: RPC calls and wall time of one tick.

    .venv/bin/python bench/finality_rpc_bench.py [--deposits 10000] [--blocks 10 100]

For each K in --blocks: --deposits real deposits (90 % ERC-20 Transfer logs from
batchTransfer transactions, 10 % native-coin transactions) spread evenly over K blocks,
turned into pending deposits through signed Alchemy payloads and ingest's parser, then,
once all K blocks are final, judged twice in the same run against the same node:
  planner   1 finalized call + eth_getBlockReceipts (+ the full block when it holds
            native deposits) per distinct block, in JSON-RPC batches
  baseline  one eth_getTransactionReceipt per deposit (+ eth_getTransactionByHash for
            native coin), one HTTP request each
Then the delay from "block finalized" to "finalisation recorded" with a 1 s tick on an
interval-mined chain (0.7 s blocks). Prints figures; asserts nothing but agreement.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from web3 import Web3

from paystream.finality.planner import check, check_one_by_one
from paystream.finality.rpc import ChainRpc
from paystream.finality.verify import ChainOutcome
from paystream.finality.watcher import FinalityWatcher
from tests.support.chain.counting import RpcCounter
from tests.support.chain.deposits import NETWORK, activities, deliver
from tests.support.chain.memory import MemoryLedger
from tests.support.chain.node import Chain, running_anvil

PORT = 8745
BATCH_RECIPIENTS = 150  # Transfer logs per batchTransfer transaction


def address(seed: str) -> str:
    return "0x" + hashlib.sha256(seed.encode()).hexdigest()[:40]


def make_deposits(chain: Chain, total: int, blocks: int, run: str):
    """Mine `total` deposits over exactly `blocks` blocks; return the pending deposits."""
    token = chain.deploy_token("PUSD", decimals=6)
    per_block = total // blocks
    natives = per_block // 10
    tokens_ = per_block - natives
    chain.set_automine(False)
    deposits = []
    # Explicit nonces: anvil handles a JSON-RPC batch of sends concurrently and would
    # hand one nonce to several of them.
    nonces = {a: int(chain.rpc("eth_getTransactionCount", a, "pending"), 16)
              for a in (chain.funder, chain.accounts[1])}

    def nonce(sender: str) -> str:
        nonces[sender] += 1
        return hex(nonces[sender] - 1)

    try:
        for b in range(blocks):
            recipients = [address(f"{run}-{b}-{i}") for i in range(per_block)]
            calls = []
            for start in range(0, tokens_, BATCH_RECIPIENTS):
                chunk = recipients[start:min(start + BATCH_RECIPIENTS, tokens_)]
                data = token.contract.encode_abi("batchTransfer", [
                    [Web3.to_checksum_address(a) for a in chunk],
                    [1_000 + i for i in range(len(chunk))]])
                calls.append(("eth_sendTransaction", [{
                    "from": chain.funder, "to": token.address, "data": data,
                    "nonce": nonce(chain.funder),
                    "gas": hex(80_000 + 32_000 * len(chunk))}]))
            for a in recipients[tokens_:]:
                calls.append(("eth_sendTransaction", [{
                    "from": chain.accounts[1], "to": a, "value": hex(10**15),
                    "nonce": nonce(chain.accounts[1])}]))
            hashes = []
            for start in range(0, len(calls), 200):
                hashes += chain.batch(calls[start:start + 200])
            chain.mine(1)
            owners = {a: f"user-{a[-8:]}" for a in recipients}
            found = deliver(activities(chain, hashes, set(recipients), [token]), owners)
            assert len(found) == per_block, (len(found), per_block)
            deposits += found
    finally:
        chain.set_automine(True)
    assert len({d.block_number for d in deposits}) == blocks
    return deposits


def measure(chain: Chain, deposits, repeats: int = 3) -> dict[str, float]:
    chain.finalize(max(d.block_number for d in deposits))
    planner_times, counts = [], None
    verdicts = None
    for _ in range(repeats):
        rpc = ChainRpc(NETWORK, chain.url, timeout=30, finalized_ttl=0, batch_size=50)
        counter = RpcCounter(rpc)
        started = time.perf_counter()
        finalized = rpc.finalized_block().number
        verdicts = check(rpc, deposits, finalized)
        planner_times.append(time.perf_counter() - started)
        counts = (counter.total, counter.round_trips, dict(counter.requests))
    assert verdicts is not None and counts is not None
    assert all(v.outcome is ChainOutcome.FINAL for _, v in verdicts)

    rpc = ChainRpc(NETWORK, chain.url, timeout=30, finalized_ttl=0)
    counter = RpcCounter(rpc)
    started = time.perf_counter()
    finalized = rpc.finalized_block().number
    baseline = check_one_by_one(rpc, deposits, finalized)
    baseline_time = time.perf_counter() - started
    assert [v for _, v in baseline] == [v for _, v in verdicts], "the two disagree"
    return {"planner_s": statistics.median(planner_times), "planner_calls": counts[0],
            "planner_round_trips": counts[1], "planner_by_method": counts[2],
            "baseline_s": baseline_time, "baseline_calls": counter.total,
            "baseline_round_trips": counter.round_trips}


def credit_delay(samples: int, tick: float) -> list[float]:
    """Seconds from a block turning final (seen by a 10 ms poller) to its deposit's
    finalisation being recorded by a watcher ticking every `tick` seconds."""
    # 0.7 s blocks against a 1 s tick: the phase between the two drifts, so the samples
    # cover the whole range instead of one fixed offset.
    with running_anvil(PORT + 1, name="anvil-bench-delay", block_time=0.7) as chain:
        ledger = MemoryLedger()
        rpc = ChainRpc(NETWORK, chain.url, timeout=5, finalized_ttl=tick / 2)
        watcher = FinalityWatcher(rpc, ledger, ledger)
        stop = threading.Event()
        final_at: dict[int, float] = {}

        def poll() -> None:
            seen = -1
            while not stop.is_set():
                now = chain.finalized()
                stamp = time.monotonic()
                for n in range(seen + 1, now + 1):
                    final_at.setdefault(n, stamp)
                seen = max(seen, now)
                time.sleep(0.01)

        poller = threading.Thread(target=poll, daemon=True)
        ticker = threading.Thread(target=watcher.run, args=(tick, stop), daemon=True)
        poller.start()
        ticker.start()
        deps = []
        for i in range(samples):
            recipient = address(f"delay-{i}")
            tx = chain.send_native(recipient, 10**16)
            while chain.receipt(tx) is None:
                time.sleep(0.05)
            [dep] = deliver(activities(chain, [tx], {recipient}), {recipient: f"u{i}"})
            ledger.add(dep)
            deps.append(dep)
            time.sleep(0.37 * (i % 3 + 1))  # land at different phases of the tick
        deadline = time.monotonic() + 30
        while ledger.pending and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        ticker.join(5)
        return [ledger.recorded_at[f"{d.event_id}:finalized"] - final_at[d.block_number]
                for d in deps]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deposits", type=int, default=10_000)
    parser.add_argument("--blocks", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--delay-samples", type=int, default=8)
    args = parser.parse_args()
    print(f"finality RPC bench: {args.deposits} pending deposits, anvil on :{PORT}")
    rows = []
    for k in args.blocks:
        with running_anvil(PORT, name="anvil-bench", gas_limit=2_000_000_000) as chain:
            started = time.perf_counter()
            deposits = make_deposits(chain, args.deposits, k, run=f"k{k}")
            made = time.perf_counter() - started
            m = measure(chain, deposits)
            rows.append((k, m))
            print(f"  K={k}: {len(deposits)} deposits mined and ingested in {made:.1f} s")
            print(f"    planner : {m['planner_calls']:>6} JSON-RPC requests in "
                  f"{m['planner_round_trips']:>3} HTTP round trips, tick "
                  f"{m['planner_s'] * 1000:8.1f} ms  {m['planner_by_method']}")
            print(f"    baseline: {m['baseline_calls']:>6} JSON-RPC requests in "
                  f"{m['baseline_round_trips']:>6} HTTP round trips, tick "
                  f"{m['baseline_s'] * 1000:8.1f} ms")
    print("\n| K blocks | planner requests / round trips / tick | baseline requests / tick |"
          " speed-up |")
    print("|---|---|---|---|")
    for k, m in rows:
        print(f"| {k} | {m['planner_calls']} / {m['planner_round_trips']} / "
              f"{m['planner_s'] * 1000:.0f} ms | {m['baseline_calls']} / "
              f"{m['baseline_s'] * 1000:.0f} ms | {m['baseline_s'] / m['planner_s']:.1f}x |")
    tick = 1.0
    delays = credit_delay(args.delay_samples, tick)
    print(f"\nfinalized block -> finalisation recorded, tick {tick:g} s, 0.7 s blocks, "
          f"{len(delays)} deposits: median {statistics.median(delays) * 1000:.0f} ms, "
          f"max {max(delays) * 1000:.0f} ms (target <= tick + 1 s = {tick + 1:g} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
