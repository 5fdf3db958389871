"""The chain scanner's test helpers (its fixtures are tests/integration/conftest.py's
`chain`, `token` and `pipe`): its environment, its cursor, deposits sent and counted,
`paystream` commands run against the pipeline's anvil."""

from __future__ import annotations

import os
import subprocess
from decimal import Decimal

from paystream.finality.evidence import BlockRef
from paystream.launch import paystream_argv
from tests.support.chain.node import Chain, Token
from tests.support.chain.pipeline import Pipeline, wait_for

REWIND = 8


def scanner_env(chain: Chain) -> dict[str, str]:
    return {"ETH_RPC_URL": chain.url, "PAYSTREAM_SCANNER_POLL_SECONDS": "0.2",
            "PAYSTREAM_SCANNER_RANGE_BLOCKS": "16",
            "PAYSTREAM_SCANNER_REWIND_BLOCKS": str(REWIND),
            "PAYSTREAM_FINALITY_TICK_SECONDS": "0.5", "PAYSTREAM_FINALITY_RPC_TIMEOUT": "1"}


def start_scanner(pipe: Pipeline, chain: Chain, name: str = "scanner") -> None:
    pipe.start(name, ["consume", "scanner", "--network", pipe.network, "--metrics-port", "0"],
               scanner_env(chain))


def cursor(pipe: Pipeline) -> BlockRef | None:
    rows = pipe.query("SELECT block_number, block_hash FROM chain_scan_cursors"
                      " WHERE network = %s", (pipe.network,))
    return BlockRef(int(rows[0][0]), rows[0][1]) if rows else None


def scanned_up_to(pipe: Pipeline, block: int) -> None:
    def probe() -> bool:
        pipe.check_alive()
        found = cursor(pipe)
        return found is not None and found.number >= block
    wait_for(f"the scanner past block {block}", probe, timeout=30)


def providers(pipe: Pipeline, user: str) -> dict[str, str]:
    return dict(pipe.query("SELECT event_id, provider FROM payment_events WHERE user_id = %s",
                           (user,)))


def credits(pipe: Pipeline, user: str) -> int:
    return int(pipe.query("SELECT count(*) FROM user_entries WHERE book = 'available'"
                          " AND user_id = %s", (user,))[0][0])


def dead_letters(pipe: Pipeline, event_ids: list[str]) -> int:
    return int(pipe.query("SELECT count(*) FROM dead_letter_queue WHERE event_id = ANY(%s)",
                          (event_ids,))[0][0])


def credited_once(pipe: Pipeline, user: str, expected: dict[str, Decimal]) -> None:
    pipe.wait_states(user, lambda s: len(s) == len(expected) and set(s.values()) == {"final"})
    wait_for("credited balances", lambda: pipe.balances(user) == {
        asset: (amount, 0) for asset, amount in expected.items()})
    assert credits(pipe, user) == len(expected)
    assert dead_letters(pipe, list(pipe.states(user))) == 0


def deposit_pair(pipe: Pipeline, chain: Chain, token: Token, address: str
                 ) -> tuple[list[str], dict[str, Decimal], int]:
    """A native and a token transfer to `address`: their hashes, the balances they
    credit, and the later block of the two."""
    wei, raw = 10**18 + 3, 4_500_000
    txs = [chain.send_native(address, wei), token.transfer(address, raw)]
    block = max(int(chain.receipt(tx)["blockNumber"], 16) for tx in txs)
    return txs, {f"{pipe.network}:native": Decimal(wei) / 10**18,
                 f"{pipe.network}:{token.address}": Decimal(raw) / 10**6}, block


def paystream(chain: Chain, *args: str, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    """`paystream ARGS` pointed at `chain`, its exit code unchecked."""
    return subprocess.run(paystream_argv(*args), capture_output=True, text=True, timeout=60,
                          env={**os.environ, **scanner_env(chain), **(env or {})})
