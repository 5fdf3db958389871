"""RPC resilience against a real node that really goes away: the breaker opens after N
errors, fails fast while open, probes once when the cooldown is over and closes when the
node is back. A hung node costs one timeout, not forever. No deposit is decided during
the outage. The node is anvil on its own port, stopped and started for real."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from paystream.finality import metrics
from paystream.finality.breaker import BreakerPolicy, BreakerState, CircuitBreaker
from paystream.finality.rpc import ChainRpc, CircuitOpenError, RpcUnavailableError
from paystream.finality.watcher import FinalityWatcher
from paystream.schema.chain import DepositKind, ExpectedDeposit
from paystream.stack import anvil
from tests.support.chain.counting import RpcCounter
from tests.support.chain.memory import MemoryLedger
from tests.support.chain.node import AnvilUnavailableError, Chain, running_anvil

PORT = 18646
NETWORK = "ANVIL_OUTAGE"


class FakeClock:
    """The breaker's time, moved by the test (the network calls stay real)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def node() -> Iterator[Chain]:
    try:
        with running_anvil(PORT) as chain:
            yield chain
    except AnvilUnavailableError as exc:
        pytest.fail(str(exc))


def test_breaker_opens_fails_fast_probes_and_closes(node: Chain) -> None:
    clock = FakeClock()
    states: list[BreakerState] = []
    breaker = CircuitBreaker("rpc:test", BreakerPolicy(failures=3, window=30, cooldown=10),
                             clock=clock, on_change=states.append)
    rpc = ChainRpc(NETWORK, node.url, timeout=2, breaker=breaker, finalized_ttl=0)
    counter = RpcCounter(rpc)
    node.mine(3)
    assert rpc.finalized_block().number == 1
    assert breaker.state is BreakerState.CLOSED

    assert node.settings is not None and node.config is not None
    assert anvil.stop(node.settings, node.config)  # the node really goes away
    for _ in range(3):
        with pytest.raises(RpcUnavailableError, match="connection failed"):
            rpc.finalized_block()
    assert breaker.state is BreakerState.OPEN

    # Open: no request leaves the process, and failing costs microseconds.
    counter.reset()
    started = time.perf_counter()
    for _ in range(100):
        with pytest.raises(CircuitOpenError):
            rpc.finalized_block()
    assert time.perf_counter() - started < 0.05
    assert counter.total == 0

    # Cooldown over while the node is still down: one probe goes out, fails, re-opens.
    clock.now += 10
    assert breaker.state is BreakerState.HALF_OPEN
    with pytest.raises(RpcUnavailableError):
        rpc.finalized_block()
    assert counter.total == 1
    assert breaker.state is BreakerState.OPEN

    # The node is back (a fresh chain): after the cooldown, the probe succeeds and closes.
    assert anvil.start(node.settings, node.config)
    with pytest.raises(CircuitOpenError):
        rpc.finalized_block()  # still open until the cooldown passes
    clock.now += 10
    assert breaker.state is BreakerState.HALF_OPEN
    assert rpc.finalized_block().number == 0
    assert breaker.state is BreakerState.CLOSED
    assert states == [BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN,
                      BreakerState.OPEN, BreakerState.HALF_OPEN, BreakerState.CLOSED]


def test_half_open_lets_exactly_one_probe_through(node: Chain) -> None:
    clock = FakeClock()
    breaker = CircuitBreaker("rpc:test", BreakerPolicy(failures=1, window=30, cooldown=5),
                             clock=clock)
    breaker.record_failure()
    clock.now += 5
    breaker.before_call()  # the probe
    with pytest.raises(CircuitOpenError):
        breaker.before_call()  # everyone else still fails fast while it is out
    rpc = ChainRpc(NETWORK, node.url, timeout=2, breaker=breaker)
    with pytest.raises(CircuitOpenError):
        rpc.block_hash(0)
    breaker.record_success()
    assert rpc.block_hash(0) is not None


def test_outage_delays_finality_and_decides_nothing(node: Chain) -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(f"rpc:{NETWORK}", BreakerPolicy(failures=2, window=30,
                                                             cooldown=10),
                             clock=clock, on_change=metrics.breaker_gauge(NETWORK))
    rpc = ChainRpc(NETWORK, node.url, timeout=2, breaker=breaker, finalized_ttl=0,
                   on_error=lambda m: metrics.RPC_ERRORS.labels(network=NETWORK,
                                                                method=m).inc())
    ledger = MemoryLedger()
    address = node.new_address()
    tx = node.send_native(address, 10**18)
    block = int(node.receipt(tx)["blockNumber"], 16)
    ledger.add(ExpectedDeposit("e1", NETWORK, DepositKind.EXTERNAL, tx, block, None,
                               address, 10**18))
    node.finalize(block)
    watcher = FinalityWatcher(rpc, ledger, ledger)
    errors = metrics.RPC_ERRORS.labels(network=NETWORK, method="eth_getBlockByNumber")
    errors_before = errors._value.get()

    assert node.settings is not None and node.config is not None
    anvil.stop(node.settings, node.config)
    reports = [watcher.tick() for _ in range(5)]
    assert [r.delayed for r in reports] == ["rpc_error", "rpc_error", "breaker_open",
                                            "breaker_open", "breaker_open"]
    assert ledger.emitted == [] and "e1" in ledger.pending  # still pending, not decided
    assert errors._value.get() == errors_before + 2
    assert metrics.BREAKER_STATE.labels(network=NETWORK)._value.get() == 2
    assert metrics.PENDING_DEPOSITS.labels(network=NETWORK)._value.get() == 1


def test_a_hung_node_costs_one_timeout_per_call() -> None:
    # A listening socket that never answers: connect succeeds, the read hangs.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        rpc = ChainRpc(NETWORK, url, timeout=0.3,
                       breaker=CircuitBreaker("rpc:hung", BreakerPolicy(failures=2)))
        started = time.monotonic()
        with pytest.raises(RpcUnavailableError, match="timed out"):
            rpc.finalized_block()
        assert 0.25 < time.monotonic() - started < 1.5
        with pytest.raises(RpcUnavailableError):
            rpc.receipt("0x" + "00" * 32)
        started = time.monotonic()
        with pytest.raises(CircuitOpenError):
            rpc.finalized_block()
        assert time.monotonic() - started < 0.01
