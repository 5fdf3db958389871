"""An in-memory PendingStore + OutcomeSink for exercising the watcher against a real
chain before the ledger's tables exist. Test-only; the real ones live in the ledger."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from paystream.finality import events
from paystream.finality.verify import FinalityVerdict
from paystream.schema.chain import ExpectedDeposit


@dataclass
class MemoryLedger:
    pending: dict[str, tuple[ExpectedDeposit, float]] = field(default_factory=dict)
    emitted: list[dict[str, Any]] = field(default_factory=list)  # outbox payloads
    recorded_at: dict[str, float] = field(default_factory=dict)  # event id -> monotonic

    def add(self, deposit: ExpectedDeposit, recorded_at: float | None = None) -> None:
        self.pending[deposit.event_id] = (deposit, recorded_at or time.time())

    # PendingStore
    def due(self, network: str, up_to_block: int, limit: int) -> Sequence[ExpectedDeposit]:
        found = sorted((d for d, _ in self.pending.values()
                        if d.network == network and d.block_number <= up_to_block),
                       key=lambda d: (d.block_number, d.event_id))
        return found[:limit]

    def backlog(self, network: str) -> tuple[int, float | None]:
        times = [t for d, t in self.pending.values() if d.network == network]
        return len(times), (min(times) if times else None)

    # OutcomeSink: what the ledger does in one transaction, minus the database.
    def record(self, network: str, decided: Sequence[tuple[ExpectedDeposit, FinalityVerdict]]
               ) -> None:
        for deposit, verdict in decided:
            body = events.payload(deposit, verdict)
            if any(e["event_id"] == body["event_id"] for e in self.emitted):
                continue  # idempotent, like the outbox's ON CONFLICT
            self.emitted.append(body)
            self.recorded_at[body["event_id"]] = time.monotonic()
            self.pending.pop(deposit.event_id, None)
