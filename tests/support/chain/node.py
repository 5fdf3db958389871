"""A real anvil for tests and benchmarks, started through stack/anvil.py, and a
small driver for it: funded dev accounts, deposit addresses, native and ERC-20 transfers,
mining, snapshots and reorgs.

Never mocks the chain: everything here is a JSON-RPC call to the node.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eth_account import Account
from web3 import Web3
from web3.providers.rpc import HTTPProvider
from web3.types import RPCEndpoint

from paystream.stack import anvil
from paystream.stack.process import StackError
from paystream.stack.settings import StackSettings

CONTRACTS = Path(__file__).resolve().parent / "contracts"
TEST_PORT = 18645


def _cs(address: str) -> str:
    # web3's contract layer insists on checksummed addresses; we keep lowercase ones.
    return Web3.to_checksum_address(address)


def contract_artifact(name: str) -> dict[str, Any]:
    return json.loads((CONTRACTS / f"{name}.json").read_text())


class AnvilUnavailableError(RuntimeError):
    """Anvil could not be installed or started; the message says how to fix it."""


@contextmanager
def running_anvil(port: int = TEST_PORT, *, name: str | None = None,
                  slots_in_an_epoch: int = 1, block_time: float = 0.0,
                  gas_limit: int | None = None) -> Iterator[Chain]:
    """Install (once) and start a fresh anvil on `port`; stop it afterwards.

    slots_in_an_epoch=1 makes `finalized` = latest - 2, so tests mine a couple of blocks
    to finalise, not 64. Raises AnvilUnavailableError (tests turn it into a failure).
    """
    s = StackSettings.from_env()
    cfg = anvil.AnvilConfig(port=port, name=name or f"anvil-test-{port}",
                            slots_in_an_epoch=slots_in_an_epoch, block_time=block_time,
                            persist=False, gas_limit=gas_limit)
    for folder in (s.state_dir, s.run_dir, s.logs_dir):
        folder.mkdir(parents=True, exist_ok=True)
    try:
        anvil.ensure_installed(s)
        anvil.stop(s, cfg)  # a leftover from an interrupted run
        anvil.start(s, cfg)
    except StackError as exc:
        raise AnvilUnavailableError(
            f"anvil {anvil.VERSION} is needed on 127.0.0.1:{port} and could not be "
            f"started: {exc}\n(it is installed from npm by stack/anvil.py: needs "
            "npm and the npm registry)") from exc
    try:
        yield Chain(cfg.rpc_url, cfg.finality_depth, settings=s, config=cfg)
    finally:
        anvil.stop(s, cfg)


@dataclass
class Token:
    chain: Chain
    address: str  # lowercase
    symbol: str
    decimals: int

    @property
    def contract(self):
        return self.chain.w3.eth.contract(address=_cs(self.address),
                                          abi=contract_artifact("TestToken")["abi"])

    def transfer(self, to: str, raw_amount: int, sender: str | None = None) -> str:
        tx = self.contract.functions.transfer(_cs(to), raw_amount) \
            .transact({"from": _cs(sender or self.chain.funder)})
        return self.chain.sent("0x" + bytes(tx).hex())

    def batch_transfer(self, to: Sequence[str], raw_amounts: Sequence[int],
                       sender: str | None = None) -> str:
        tx = self.contract.functions.batchTransfer(
            [_cs(a) for a in to], list(raw_amounts)) \
            .transact({"from": _cs(sender or self.chain.funder),
                       "gas": 60_000 + 40_000 * len(to)})
        return self.chain.sent("0x" + bytes(tx).hex())

    def balance_of(self, owner: str) -> int:
        return int(self.contract.functions.balanceOf(_cs(owner)).call())


class Chain:
    """A driver for one anvil: every method is one or a few real JSON-RPC calls."""

    def __init__(self, url: str, finality_depth: int, *, settings: StackSettings | None = None,
                 config: anvil.AnvilConfig | None = None) -> None:
        self.url = url
        self.finality_depth = finality_depth
        self.settings = settings
        self.config = config
        self.w3 = Web3(HTTPProvider(url, request_kwargs={"timeout": 30},
                                    exception_retry_configuration=None))
        self.accounts = [a.lower() for a in self.w3.eth.accounts]  # unlocked dev accounts
        self.funder = self.accounts[0]
        self.automine = True

    # --- raw JSON-RPC -------------------------------------------------------------------

    def rpc(self, method: str, *params: Any) -> Any:
        response = self.w3.provider.make_request(RPCEndpoint(method), list(params))
        if "error" in response:
            raise RuntimeError(f"{method}: {response['error']}")
        return response.get("result")

    def batch(self, calls: Sequence[tuple[str, list[Any]]]) -> list[Any]:
        responses = self.w3.provider.make_batch_request(
            [(RPCEndpoint(m), p) for m, p in calls])
        out = []
        for response in responses:
            if "error" in response:
                raise RuntimeError(f"batch: {response['error']}")
            out.append(response.get("result"))
        return out

    # --- blocks -------------------------------------------------------------------------

    def head(self) -> int:
        return int(self.rpc("eth_blockNumber"), 16)

    def finalized(self) -> int:
        return int(self.rpc("eth_getBlockByNumber", "finalized", False)["number"], 16)

    def block(self, number: int | str, full: bool = False) -> dict[str, Any]:
        tag = hex(number) if isinstance(number, int) else number
        return self.rpc("eth_getBlockByNumber", tag, full)

    def mine(self, blocks: int = 1) -> int:
        self.rpc("anvil_mine", hex(blocks))
        return self.head()

    def finalize(self, block_number: int) -> int:
        """Mine until `block_number` is at or below the finalized block."""
        missing = block_number + self.finality_depth - self.head()
        if missing > 0:
            self.mine(missing)
        return self.finalized()

    def set_automine(self, on: bool) -> None:
        self.rpc("evm_setAutomine", on)
        self.automine = on

    def sent(self, tx_hash: str, timeout: float = 10.0) -> str:
        """`tx_hash`, once its receipt is readable when automine is on: anvil answers a
        send before the block is readable on a loaded machine (measured in CI)."""
        deadline = time.monotonic() + timeout
        while self.automine and self.receipt(tx_hash) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{tx_hash} not mined after {timeout:g} s")
            time.sleep(0.02)
        return tx_hash

    def snapshot(self) -> str:
        return self.rpc("evm_snapshot")

    def revert(self, snapshot_id: str) -> bool:
        return bool(self.rpc("evm_revert", snapshot_id))

    def reorg(self, depth: int, tx_block_pairs: Sequence[tuple[dict[str, Any] | str, int]] = ()
              ) -> None:
        """anvil_reorg: replace the last `depth` blocks with as many new ones; each
        (tx, i) puts a transaction (a request object for a dev account, or raw signed
        bytes as 0x-hex: the same hash) into the i-th new block (0-based)."""
        self.rpc("anvil_reorg", depth, [[tx, i] for tx, i in tx_block_pairs])

    # --- value --------------------------------------------------------------------------

    def new_address(self) -> str:
        """A fresh deposit address (its key is thrown away: it only receives)."""
        return Account.create().address.lower()

    def send_native(self, to: str, wei: int, sender: str | None = None) -> str:
        return self.sent(self.rpc("eth_sendTransaction", {"from": sender or self.funder,
                                                          "to": to, "value": hex(wei)}))

    def receipt(self, tx_hash: str) -> dict[str, Any] | None:
        return self.rpc("eth_getTransactionReceipt", tx_hash)

    def transaction(self, tx_hash: str) -> dict[str, Any] | None:
        return self.rpc("eth_getTransactionByHash", tx_hash)

    def deploy_token(self, symbol: str = "PUSD", decimals: int = 6,
                     supply: int = 10**30) -> Token:
        art = contract_artifact("TestToken")
        factory = self.w3.eth.contract(abi=art["abi"], bytecode=art["bytecode"])
        tx = factory.constructor(f"paystream {symbol}", symbol, decimals, supply) \
            .transact({"from": _cs(self.funder)})
        receipt = self.w3.eth.wait_for_transaction_receipt(tx, timeout=30)
        return Token(self, str(receipt["contractAddress"]).lower(), symbol, decimals)
