"""Every finality metric, declared once. Label `network` is the provider's network name
(ETH_MAINNET, ...). Served from the finality consumer's metrics port like the others
(consumers/metrics.serve: loopback unless PAYSTREAM_METRICS_HOST says otherwise)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram

from paystream.finality.breaker import BreakerState

# Chain deposits recorded as pending finality (not yet credited to available balance).
PENDING_DEPOSITS = Gauge(
    "paystream_finality_pending_deposits", "Deposits waiting for finality", ["network"])
# Now minus when the oldest pending deposit was recorded; alert when it outgrows the
# chain's finality time by far (RPC outage, stuck watcher).
OLDEST_PENDING_AGE = Gauge(
    "paystream_finality_oldest_pending_age_seconds", "Age of the oldest pending deposit",
    ["network"])
# Finalisation events emitted (deposit found in a final block, transfer matched).
FINALISATIONS = Counter(
    "paystream_finality_finalisations_total", "Deposits found final", ["network", "moved"])
# Deposits marked reorged, by reason (tx_not_in_chain, tx_reverted, log_missing, ...).
REORGS = Counter(
    "paystream_finality_reorgs_total", "Deposits reorganised out or mismatched",
    ["network", "reason"])
# Deposits credited before finality (credit depth reached: deposit_credited emitted).
CREDITS = Counter(
    "paystream_finality_credits_total", "Deposits credited before finality", ["network"])
# Credited deposits a reorg took back (deposit_reversed emitted), by reason
# (tx_not_in_chain, tx_reverted, log_missing, ...): each is a compensating debit.
REVERSALS = Counter(
    "paystream_finality_reversals_total", "Credited deposits reversed", ["network", "reason"])
# Deposits credited before finality and not final yet: what a reorg could still take back.
CREDITED_DEPOSITS = Gauge(
    "paystream_finality_credited_deposits", "Deposits credited, not final yet", ["network"])
# Deposits marked reorg suspects from the provider's word (removed log, block re-mined
# or re-hashed); the chain settles them at finality like any pending deposit.
SUSPECTS = Counter(
    "paystream_finality_reorg_suspects_total", "Deposits a provider reorg notice touched",
    ["network"])
# JSON-RPC requests sent, by method (a batch counts each request it carries).
RPC_CALLS = Counter(
    "paystream_finality_rpc_calls_total", "JSON-RPC requests sent", ["network", "method"])
# Failed RPC calls by method (timeouts, refused connections, error answers).
RPC_ERRORS = Counter(
    "paystream_finality_rpc_errors_total", "Failed RPC calls", ["network", "method"])
# Calls refused without touching the network because the breaker was open.
RPC_SHORT_CIRCUITS = Counter(
    "paystream_finality_rpc_short_circuits_total", "Calls failed fast by an open breaker",
    ["network"])
# 0 closed, 1 half-open (one probe allowed), 2 open (calls fail fast).
BREAKER_STATE = Gauge(
    "paystream_finality_breaker_state", "RPC circuit breaker: 0 closed, 1 half-open, 2 open",
    ["network"])
# The finalized block number the last successful tick saw.
FINALIZED_BLOCK = Gauge(
    "paystream_finality_finalized_block", "Last finalized block seen", ["network"])
# Wall time of one tick: finalized block, pending query, RPC checks, emits.
TICK_SECONDS = Histogram(
    "paystream_finality_tick_seconds", "Duration of a finality tick", ["network"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
# Ticks that decided nothing because the chain could not be read (finality delayed).
DELAYED_TICKS = Counter(
    "paystream_finality_delayed_ticks_total", "Ticks skipped by an RPC failure",
    ["network", "cause"])


def breaker_gauge(network: str) -> Callable[[BreakerState], None]:
    """An on_change hook for CircuitBreaker that keeps BREAKER_STATE current."""
    gauge = BREAKER_STATE.labels(network=network)

    def update(state: BreakerState) -> None:
        gauge.set(int(state))

    return update
