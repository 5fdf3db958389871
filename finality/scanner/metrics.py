"""Every chain scanner metric, declared once. Label `network` as in finality.metrics; the
scanner's RPC calls, errors and breaker are counted there (it uses the watcher's client)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# The last block scanned (the cursor) and the block the scanner scans up to.
CURSOR_BLOCK = Gauge(
    "paystream_scanner_cursor_block", "Last block the chain scanner scanned", ["network"])
TARGET_BLOCK = Gauge(
    "paystream_scanner_target_block", "Finalized (or credit-depth) block scanned up to",
    ["network"])
BLOCKS = Counter(
    "paystream_scanner_blocks_total", "Blocks scanned (a rescan counts again)", ["network"])
# Deposits found, by outcome: accepted (a new event) or known (already recorded, by a
# webhook or an earlier scan: nothing written).
DEPOSITS = Counter(
    "paystream_scanner_deposits_total", "Deposits found in scanned blocks",
    ["network", "outcome"])
# Transfers into our addresses that make no deposit event: failed transaction, zero
# value, token without decimals(), amount not representable.
SKIPPED = Counter(
    "paystream_scanner_skipped_transfers_total", "Transfers found but not recorded",
    ["network", "reason"])
# The cursor's block was no longer on the chain: rewound and rescanned.
REORGS = Counter(
    "paystream_scanner_reorgs_total", "Reorgs found below the scanner's cursor", ["network"])
# A pass found the cursor locked by another scanner of the same network.
BUSY = Counter(
    "paystream_scanner_busy_total", "Passes skipped: another scanner holds the cursor",
    ["network"])
# Passes that failed (RPC or DB): retried next poll, the cursor unmoved.
FAILED = Counter(
    "paystream_scanner_failed_passes_total", "Scanner passes that failed", ["network", "cause"])
PASS_SECONDS = Histogram(
    "paystream_scanner_pass_seconds", "Duration of a scanner pass", ["network"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
