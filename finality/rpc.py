"""A web3 JSON-RPC client for one network, with the methods the finality watcher needs.

Every call:
  - has a timeout (web3's HTTPProvider `request_kwargs`), and web3's own retry loop is
    switched off: retrying is the watcher's next tick, and a hidden retry would both
    multiply the outage cost and hide failures from the breaker;
  - goes through the network's circuit breaker: while it is open, calls raise
    CircuitOpenError without touching the network;
  - is counted (calls and errors by method) through `on_call` / `on_error` hooks, which
    the watcher points at the Prometheus metrics and tests at counters.

Results are parsed into finality.evidence values. "Not found" (a null result)
is an answer, not an error: it never trips the breaker.

`finalized_block()` uses the `finalized` tag, or `latest - confirmations` on networks
configured without one; its answer is cached for `finalized_ttl` seconds (a tick asks
once, and several callers within the TTL share one call). `head()` (eth_blockNumber,
for a credit height) is cached the same way and shared with the confirmations path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import requests
from web3 import Web3
from web3.providers.rpc import HTTPProvider
from web3.types import RPCEndpoint

from paystream.finality.breaker import CircuitBreaker, CircuitOpenError
from paystream.finality.evidence import (
    BlockEvidence,
    BlockRef,
    MalformedResultError,
    Receipt,
    Transaction,
    parse_block_ref,
    parse_receipt,
    parse_transaction,
    quantity,
)

__all__ = ["ChainRpc", "CircuitOpenError", "RpcError", "RpcUnavailableError"]


class RpcError(RuntimeError):
    """An RPC call failed; the deposit stays pending (never credited, never dead-lettered)."""

    def __init__(self, method: str, detail: str) -> None:
        super().__init__(f"{method}: {detail}")
        self.method = method


class RpcUnavailableError(RpcError):
    """Transport failure: timeout, refused connection, HTTP error, unreadable answer."""


class RpcRejectedError(RpcError):
    """The node answered with a JSON-RPC error object."""


Hook = Callable[[str], None]


def _noop(_method: str) -> None:
    pass


class ChainRpc:
    def __init__(self, network: str, url: str, *, timeout: float = 5.0,
                 confirmations: int | None = None, breaker: CircuitBreaker | None = None,
                 finalized_ttl: float = 1.0, batch_size: int = 50,
                 clock: Callable[[], float] = time.monotonic,
                 on_call: Hook = _noop, on_error: Hook = _noop) -> None:
        if timeout <= 0:
            raise ValueError("an RPC timeout must be positive")
        self.network = network
        self.url = url
        self.timeout = timeout
        self.confirmations = confirmations  # None: the node has a `finalized` tag
        self.breaker = breaker or CircuitBreaker(f"rpc:{network}")
        self.finalized_ttl = finalized_ttl
        self.batch_size = batch_size
        self._clock = clock
        self._on_call = on_call
        self._on_error = on_error
        self._finalized: tuple[float, BlockRef] | None = None
        self._head: tuple[float, int] | None = None
        # No network work here: the provider connects on the first call.
        self._provider = HTTPProvider(url, request_kwargs={"timeout": timeout},
                                      exception_retry_configuration=None)
        self.w3 = Web3(self._provider)

    # --- the watcher's vocabulary -------------------------------------------------------

    def finalized_block(self) -> BlockRef:
        """The newest block that can no longer be reorganised out (cached briefly)."""
        now = self._clock()
        if self._finalized is not None and now - self._finalized[0] < self.finalized_ttl:
            return self._finalized[1]
        if self.confirmations is None:
            ref = parse_block_ref(self._require(
                "eth_getBlockByNumber", ["finalized", False]))
        else:
            number = max(self.head() - self.confirmations, 0)
            ref = parse_block_ref(self._require(
                "eth_getBlockByNumber", [hex(number), False]))
        self._finalized = (now, ref)
        return ref

    def head(self) -> int:
        """The latest block number (cached for `finalized_ttl`, like the finalized one)."""
        now = self._clock()
        if self._head is not None and now - self._head[0] < self.finalized_ttl:
            return self._head[1]
        number = quantity(self._call("eth_blockNumber", []), "eth_blockNumber")
        self._head = (now, number)
        return number

    def block_hash(self, number: int) -> str | None:
        """The canonical hash at `number`, None if the chain is not that long."""
        block = self._call("eth_getBlockByNumber", [hex(number), False])
        return None if block is None else parse_block_ref(block).hash

    def receipt(self, tx_hash: str) -> Receipt | None:
        """The receipt on the canonical chain, None if the transaction is not mined there."""
        result = self._call("eth_getTransactionReceipt", [tx_hash])
        return None if result is None else self._parse(parse_receipt, result,
                                                       "eth_getTransactionReceipt")

    def transaction(self, tx_hash: str) -> Transaction | None:
        result = self._call("eth_getTransactionByHash", [tx_hash])
        return None if result is None else self._parse(parse_transaction, result,
                                                       "eth_getTransactionByHash")

    def block_receipts(self, block: int | str) -> list[Receipt] | None:
        """All receipts of one block (by number or hash); None if there is no such block."""
        result = self._call("eth_getBlockReceipts", [_block_id(block)])
        if result is None:
            return None
        return [self._parse(parse_receipt, r, "eth_getBlockReceipts") for r in result]

    def blocks_evidence(self, numbers: Sequence[int], with_transactions: set[int]
                        ) -> dict[int, BlockEvidence]:
        """Receipts of each block (and its transactions where asked), in JSON-RPC batches
        of `batch_size` requests: 1-2 requests per distinct block, whatever the number
        of deposits in it. A block missing from the chain is absent from the answer."""
        requests_: list[tuple[str, list[Any]]] = []
        for number in numbers:
            requests_.append(("eth_getBlockReceipts", [hex(number)]))
            if number in with_transactions:
                requests_.append(("eth_getBlockByNumber", [hex(number), True]))
        answers: list[Any] = []
        for start in range(0, len(requests_), self.batch_size):
            answers.extend(self._batch(requests_[start:start + self.batch_size]))
        evidence: dict[int, BlockEvidence] = {}
        position = 0
        for number in numbers:
            receipts_raw = answers[position]
            position += 1
            block_raw = None
            if number in with_transactions:
                block_raw = answers[position]
                position += 1
            if receipts_raw is None or (number in with_transactions and block_raw is None):
                continue
            evidence[number] = self._evidence(number, receipts_raw, block_raw)
        return evidence

    # --- the chain scanner's vocabulary (finality/scanner/blocks.py parses the answers) -------

    def full_blocks(self, numbers: Sequence[int]) -> list[Any]:
        """Each block with its transactions, in batches of `batch_size`; a block the chain
        does not have yet is None."""
        calls = [("eth_getBlockByNumber", [hex(n), True]) for n in numbers]
        answers: list[Any] = []
        for start in range(0, len(calls), self.batch_size):
            answers.extend(self._batch(calls[start:start + self.batch_size]))
        return answers

    def logs(self, first: int, last: int, topics: Sequence[str | None]) -> list[Any]:
        """eth_getLogs over blocks first..last (inclusive) for `topics`, every contract."""
        result = self._require("eth_getLogs", [{"fromBlock": hex(first), "toBlock": hex(last),
                                                "topics": list(topics)}])
        if not isinstance(result, list):
            self._failed("eth_getLogs")
            raise RpcUnavailableError("eth_getLogs", f"not a list: {result!r:.200}")
        return result

    def balance(self, address: str, block: int) -> int:
        """eth_getBalance of `address` at `block`, in wei."""
        return quantity(self._require("eth_getBalance", [address, hex(block)]),
                        "eth_getBalance")

    def call(self, to: str, data: str, block: int | str = "latest") -> str | None:
        """eth_call at `block` (the latest unless told); None when the node refuses it
        (no such contract, a revert): the caller decides what that means."""
        self.breaker.before_call()
        self._on_call("eth_call")
        try:
            response = self.w3.provider.make_request(
                RPCEndpoint("eth_call"), [{"to": to, "data": data}, _block_id(block)])
        except (requests.RequestException, OSError, ValueError) as exc:
            self._failed("eth_call")
            raise RpcUnavailableError("eth_call", _describe(exc)) from exc
        if isinstance(response, dict) and "error" in response:
            # A revert is the contract's answer, not the node failing: the breaker only
            # counts a node that cannot answer.
            self.breaker.record_success()
            return None
        result = self._result("eth_call", response)
        return result if isinstance(result, str) else None

    # --- transport ----------------------------------------------------------------------

    def _evidence(self, number: int, receipts_raw: Any, block_raw: Any) -> BlockEvidence:
        receipts = [self._parse(parse_receipt, r, "eth_getBlockReceipts")
                    for r in receipts_raw]
        transactions = None
        if block_raw is not None:
            ref = self._parse(parse_block_ref, block_raw, "eth_getBlockByNumber")
            transactions = {t.tx_hash: t for t in (
                self._parse(parse_transaction, raw, "eth_getBlockByNumber")
                for raw in block_raw.get("transactions") or ())}
        else:
            ref = receipts[0].block if receipts else None
        if ref is None:  # an empty block: no receipts, nothing to match, hash unknown
            return BlockEvidence(BlockRef(number, ""), {}, transactions)
        if any(r.block_hash != ref.hash for r in receipts):
            # The two answers straddle a reorg of this block: judge it next tick.
            raise RpcUnavailableError("eth_getBlockReceipts", f"block {number} changed mid-read")
        return BlockEvidence(ref, {r.tx_hash: r for r in receipts}, transactions)

    def _require(self, method: str, params: list[Any]) -> Any:
        result = self._call(method, params)
        if result is None:
            raise RpcUnavailableError(method, f"no result for {params!r}")
        return result

    def _call(self, method: str, params: list[Any]) -> Any:
        self.breaker.before_call()
        self._on_call(method)
        try:
            response = self.w3.provider.make_request(RPCEndpoint(method), params)
        except (requests.RequestException, OSError, ValueError) as exc:
            self._failed(method)
            raise RpcUnavailableError(method, _describe(exc)) from exc
        return self._result(method, response)

    def _batch(self, calls: Sequence[tuple[str, list[Any]]]) -> list[Any]:
        """One HTTP round trip for several requests; any failure fails the whole batch."""
        if not calls:
            return []
        label = "batch:" + "+".join(sorted({m for m, _ in calls}))
        self.breaker.before_call()
        for method, _ in calls:
            self._on_call(method)
        try:
            responses = self._provider.make_batch_request(
                [(RPCEndpoint(m), p) for m, p in calls])
        except (requests.RequestException, OSError, ValueError) as exc:
            self._failed(label)
            raise RpcUnavailableError(label, _describe(exc)) from exc
        if not isinstance(responses, list) or len(responses) != len(calls):
            self._failed(label)
            raise RpcUnavailableError(label, f"batch answer of the wrong shape: {responses!r:.200}")
        results = []
        for (method, _), response in zip(calls, responses, strict=True):
            if "error" in response:
                self._failed(method)
                raise RpcRejectedError(method, str(response["error"])[:300])
            results.append(response.get("result"))
        self.breaker.record_success()
        return results

    def _result(self, method: str, response: Any) -> Any:
        if not isinstance(response, dict):
            self._failed(method)
            raise RpcUnavailableError(method, f"not a JSON-RPC response: {response!r:.200}")
        if "error" in response:
            # An error object means the node is up but refused: counted, and it trips
            # the breaker too (a node failing every call is as bad as a dead one).
            self._failed(method)
            raise RpcRejectedError(method, str(response["error"])[:300])
        self.breaker.record_success()
        return response.get("result")

    def _parse(self, parser: Callable[[Any], Any], raw: Any, method: str) -> Any:
        try:
            return parser(raw)
        except MalformedResultError as exc:
            self._on_error(method)
            raise RpcUnavailableError(method, str(exc)) from exc

    def _failed(self, method: str) -> None:
        self._on_error(method)
        self.breaker.record_failure()


def _block_id(block: int | str) -> str:
    return hex(block) if isinstance(block, int) else block


def _describe(exc: BaseException) -> str:
    if isinstance(exc, requests.Timeout):
        return f"timed out ({type(exc).__name__})"
    if isinstance(exc, requests.ConnectionError):
        return "connection failed"
    return f"{type(exc).__name__}: {str(exc)[:200]}"
