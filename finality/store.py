"""The watcher's DB side: the ledger's chain_deposits rows, read and marked.

`ChainDepositStore` is the PendingStore (due / backlog) and the OutcomeSink (record) of
watcher.py, on one Postgres connection per network thread.

The rows and who moves them from which state to which: schema/chain_deposits.py (the
one module that writes the table); this store reads what the watcher needs and makes
the watcher's moves through it.

Suspects are settled like every pending deposit: by the chain, once the finalized block
passes the reported block (verify.py compares the receipt's block hash with the one the
provider reported). `suspect` says "a reorg was announced", for operators and metrics.

One transfer is credited once: a FINAL verdict claims the transfer's on-chain identity
(`transfer_key`: network, tx hash, and the log index in the block it is final in, or
`external` / the trace address). A re-mined token log can reach us under a second event
id (its log index changed, so Alchemy's new payload names another log); whichever deposit
claims the transfer first is finalised, the other becomes REORGED("duplicate_transfer").
A CONFIRMED verdict (credit before finality) claims it the same way; a reversal frees it
(the transfer it named is gone from the chain).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal
from typing import Any

import psycopg2
import structlog

from paystream.finality import events, metrics
from paystream.finality.verify import ChainOutcome, FinalityVerdict, reorged
from paystream.schema import chain_deposits
from paystream.schema.amounts import format_amount
from paystream.schema.chain import DepositError, DepositKind, ExpectedDeposit
from paystream.schema.chain_deposits import DepositState
from paystream.schema.db import Connection, Cursor, connect, database_url
from paystream.schema.events import PAYMENTS_AGGREGATE
from paystream.schema.outbox import emit

log = structlog.get_logger("paystream.finality")


def _usable(rows: Iterable[tuple[str, Any, int | None]]
            ) -> Iterator[tuple[ExpectedDeposit, int | None]]:
    """Each row's deposit (and its third column), skipping one whose chain identity
    cannot be read: logged (once per process) and left in place, it stays in the backlog
    the health check and the oldest-pending alert show, instead of failing the tick for
    every deposit of its network."""
    for event_id, chain, extra in rows:
        try:
            yield ExpectedDeposit.from_chain(event_id, chain), extra
        except DepositError as exc:
            if event_id not in _UNUSABLE_TOLD:
                _UNUSABLE_TOLD.add(event_id)
                log.error("deposit_unusable", event_id=event_id, error=str(exc))


_UNUSABLE_TOLD: set[str] = set()

PROVIDER = "finality"  # the `provider` of settlement events on the wire
OPEN_STATES = ("pending", "suspect")


def transfer_key(deposit: ExpectedDeposit, verdict: FinalityVerdict) -> str:
    """The on-chain identity of the transfer a FINAL verdict credits."""
    base = f"{deposit.network}:{deposit.tx_hash}"
    if deposit.kind is DepositKind.TOKEN:
        return f"{base}:log:{verdict.log_index}"
    if deposit.kind is DepositKind.INTERNAL:
        return f"{base}:trace:{deposit.trace_address}"
    return f"{base}:external"


def settlement_wire(deposit: ExpectedDeposit, verdict: FinalityVerdict, user_id: str,
                    asset: str, amount: Decimal, credited: bool = False) -> dict[str, Any]:
    """The settlement event as a PaymentEvent wire dict (schema.events.parse_wire reads
    it back). Nulls and empty lists are left out: Debezium's JSON expansion drops them,
    and the event on Kafka must be exactly the event written."""
    chain = {k: v for k, v in events.payload(deposit, verdict, credited).items()
             if v is not None and v != [] and k not in ("event_id", "event_type")}
    return {"event_id": events.event_id(deposit, verdict, credited),
            "event_type": events.event_type(verdict, credited), "user_id": user_id,
            "asset": asset, "amount": format_amount(amount), "provider": PROVIDER,
            "chain": chain}


class ChainDepositStore:
    """PendingStore + OutcomeSink on Postgres. Not thread-safe: one per watcher thread.

    The connection is opened lazily and dropped after any error, so a Postgres restart
    costs the failing tick only (watcher.run logs it and tries again next tick).
    """

    def __init__(self, connect_fn: Callable[[], Connection] | None = None) -> None:
        self._connect = connect_fn or (lambda: connect(database_url("finality"),
                                                           application_name="paystream-finality"))
        self._conn: Connection | None = None

    # --- connection -------------------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Cursor]:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        conn = self._conn
        try:
            with conn, conn.cursor() as cur:  # commit on success, roll back on error
                yield cur
        except (psycopg2.OperationalError, psycopg2.InterfaceError):
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg2.Error):
                self._conn.close()
            self._conn = None

    # --- PendingStore -----------------------------------------------------------------

    def due(self, network: str, up_to_block: int, limit: int) -> Sequence[ExpectedDeposit]:
        with self._transaction() as cur:
            cur.execute(
                "SELECT event_id, chain FROM chain_deposits WHERE network = %s"
                " AND state IN ('pending', 'suspect') AND block_number <= %s"
                " ORDER BY block_number, event_id LIMIT %s", (network, up_to_block, limit))
            rows = cur.fetchall()
        return [d for d, _ in _usable((event_id, chain, None) for event_id, chain in rows)]

    def backlog(self, network: str) -> tuple[int, float | None]:
        """Deposits not yet credited nor released (pending, suspect, or settled by the
        watcher but not yet applied by the ledger) and when the oldest was recorded."""
        with self._transaction() as cur:
            cur.execute(
                "SELECT count(*), extract(epoch FROM min(recorded_at)) FROM chain_deposits"
                " WHERE network = %s AND state IN ('pending', 'suspect', 'crediting',"
                " 'finalizing', 'reorging') AND credited_at IS NULL", (network,))
            row = cur.fetchone()
        assert row is not None  # count(*) always answers one row
        count, oldest = row
        return int(count), (float(oldest) if oldest is not None else None)

    def credited(self, network: str, limit: int) -> list[tuple[ExpectedDeposit, int | None]]:
        """Deposits credited before finality and not final yet, re-checked every tick,
        with the credit height they were first found missing at (None: not missing)."""
        with self._transaction() as cur:
            cur.execute(
                "SELECT event_id, chain, missing_since_block FROM chain_deposits"
                " WHERE network = %s AND state = 'credited'"
                " ORDER BY block_number, event_id LIMIT %s", (network, limit))
            rows = cur.fetchall()
        return list(_usable(rows))

    def credited_count(self, network: str) -> int:
        """Credited, not final: money a reorg could still take back."""
        with self._transaction() as cur:
            cur.execute("SELECT count(*) FROM chain_deposits WHERE network = %s"
                        " AND state IN ('credited', 'finalizing', 'reversing')"
                        " AND credited_at IS NOT NULL", (network,))
            row = cur.fetchone()
        assert row is not None  # count(*) always answers one row
        return int(row[0])

    def mark_missing(self, network: str, marks: dict[str, int | None]) -> None:
        """Set (or clear, with None) credited deposits' missing_since_block."""
        if not marks:
            return
        with self._transaction() as cur:
            chain_deposits.mark_missing(cur, network, marks)

    def mark_suspects(self, network: str) -> int:
        """pending -> suspect for deposits a provider announced a reorg for: a `reorg`
        notice on their event id (log.removed=true, or the transfer re-mined in another
        block), or another deposit reported in the same block number with another
        block hash. Returns how many were marked now."""
        with self._transaction() as cur:
            marked = chain_deposits.mark_suspects(cur, network)
        if marked:
            metrics.SUSPECTS.labels(network=network).inc(marked)
            log.warning("deposits_reorg_suspect", network=network, count=marked)
        return marked

    # --- OutcomeSink ------------------------------------------------------------------

    def record(self, network: str, decided: Sequence[tuple[ExpectedDeposit, FinalityVerdict]],
               credited: Sequence[tuple[ExpectedDeposit, FinalityVerdict]] = ()) -> None:
        """Mark each decided deposit and emit its settlement event, all in ONE
        transaction. A deposit no longer open (decided by an earlier, committed tick)
        is skipped, so a verdict is never emitted twice. `decided`: pending deposits
        (FINAL, REORGED, CONFIRMED); `credited`: deposits credited before finality
        (FINAL: finalised without money; REORGED / UNCONFIRMED: reversed)."""
        with self._transaction() as cur:
            for deposit, verdict in credited:
                self._settle(cur, deposit, verdict, None, credited=True)
            keys = {d.event_id: transfer_key(d, v) for d, v in decided
                    if v.outcome in (ChainOutcome.FINAL, ChainOutcome.CONFIRMED)}
            cur.execute("SELECT transfer_key, event_id FROM chain_deposits"
                        " WHERE transfer_key = ANY(%s)", (sorted(set(keys.values())),))
            claimed: dict[str, str] = dict(cur.fetchall())
            for deposit, verdict in decided:
                key = keys.get(deposit.event_id)
                if key is not None and claimed.get(key, deposit.event_id) != deposit.event_id:
                    metrics.REORGS.labels(network=network, reason="duplicate_transfer").inc()
                    log.warning("deposit_duplicate_transfer", network=network,
                                event_id=deposit.event_id, credited_as=claimed[key])
                    verdict, key = reorged("duplicate_transfer"), None
                self._settle(cur, deposit, verdict, key)
                if key is not None:
                    claimed[key] = deposit.event_id

    def _settle(self, cur: Cursor, deposit: ExpectedDeposit, verdict: FinalityVerdict,
                key: str | None, credited: bool = False) -> None:
        final = verdict.outcome is ChainOutcome.FINAL
        if credited:
            state = DepositState.FINALIZING if final else DepositState.REVERSING
            sources = [DepositState.CREDITED]
        else:
            state = {ChainOutcome.FINAL: DepositState.FINALIZING,
                     ChainOutcome.CONFIRMED: DepositState.CREDITING}.get(
                verdict.outcome, DepositState.REORGING)
            sources = [DepositState.PENDING, DepositState.SUSPECT]
        block = verdict.block if final else None
        decided = chain_deposits.decide(
            cur, deposit.event_id, state, from_states=sources, reason=verdict.reason,
            transfer_key=key, final_block=(block.number, block.hash) if block else None,
            final_log_index=verdict.log_index if final else None)
        if decided is None:
            return
        wire = settlement_wire(deposit, verdict, decided.user_id, decided.asset,
                               decided.amount, credited)
        chain_deposits.keep_settlement(cur, deposit.event_id, wire)
        emit(cur, aggregatetype=PAYMENTS_AGGREGATE, aggregateid=decided.user_id,
             event_type=wire["event_type"], event_id=wire["event_id"],
             payload=json.loads(json.dumps(wire)), trace_id=decided.trace_id)
