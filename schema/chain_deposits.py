"""chain_deposits: a chain deposit's way from held to settled, one writer per state change.

The only module with SQL that writes the table (its readers query it where they use it:
the finality watcher's store, health, the chaos invariants). Who moves what:

  ledger   hold: INSERT state=pending, in the transaction that adds the amount to
           balances.pending; credit: crediting -> credited; settle: finalizing -> final,
           reorging -> reorged, reversing -> reversed, when it applies the settlement
  watcher  mark_suspects: pending -> suspect (reorg notices, re-hashed blocks);
           decide: pending|suspect -> finalizing|reorging|crediting and
           credited -> finalizing|reversing, in the transaction that writes the
           settlement event to the outbox (a verdict is emitted at most once);
           mark_missing: credited.missing_since_block (the reversal's grace clock);
           keep_settlement: the settlement message decide's transaction emitted
  ingest   nothing: it records `reorg` notices in ingest_notices; the watcher reads them

The states (migrations 0004 and 0005):
  pending     held in balances.pending, waiting for the finalized block
  suspect     a provider said a reorg touched it
  crediting   the watcher emitted deposit_credited (deep enough, not final)
  credited    the ledger moved it to available; the watcher re-checks it every tick
  finalizing  the watcher emitted deposit_finalized
  reorging    the watcher emitted deposit_reorged
  reversing   the watcher emitted deposit_reversed
  final / reorged / reversed   the ledger applied the settlement (terminal)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from enum import StrEnum

from paystream.schema.amounts import format_amount
from paystream.schema.chain import ExpectedDeposit
from paystream.schema.db import Cursor
from paystream.schema.events import PaymentEvent


class DepositState(StrEnum):
    PENDING = "pending"
    SUSPECT = "suspect"
    CREDITING = "crediting"
    CREDITED = "credited"
    FINALIZING = "finalizing"
    REORGING = "reorging"
    REVERSING = "reversing"
    FINAL = "final"
    REORGED = "reorged"
    REVERSED = "reversed"


TERMINAL_STATES = (DepositState.FINAL, DepositState.REORGED, DepositState.REVERSED)


@dataclass(frozen=True, slots=True)
class HeldDeposit:
    """What the ledger checks a settlement against."""

    user_id: str
    asset: str
    amount: Decimal
    state: DepositState
    credited: bool  # the ledger credited it before finality (credited_at is set)
    network: str = ""  # whose custody account its money is in
    # The UTC day the ledger recorded it: its settlements' claims are filed under it
    # (schema/processed_events.py OutcomeRow).
    day: date | None = None


@dataclass(frozen=True, slots=True)
class DecidedDeposit:
    """The deposit a decision moved: what its settlement event carries."""

    user_id: str
    asset: str
    amount: Decimal
    trace_id: str


def held(cur: Cursor, event_ids: Iterable[str]) -> dict[str, HeldDeposit]:
    """The recorded deposits among `event_ids`, by event id."""
    wanted = sorted(set(event_ids))
    if not wanted:
        return {}
    cur.execute("SELECT event_id, user_id, asset, amount, state, credited_at IS NOT NULL,"
                " network, (recorded_at AT TIME ZONE 'UTC')::date FROM chain_deposits"
                " WHERE event_id = ANY(%s)", (wanted,))
    return {row[0]: HeldDeposit(row[1], row[2], row[3], DepositState(row[4]), row[5],
                                row[6], row[7]) for row in cur.fetchall()}


# --- the ledger's moves, in the batch transaction that moves the money ----------------

def hold(cur: Cursor, deposits: Sequence[tuple[PaymentEvent, str]]) -> None:
    """Record each (chain deposit, trace id) as pending; a deposit already recorded is
    left as it is. The chain identity was validated when the event was read."""
    if not deposits:
        return
    rows = []
    for event, trace_id in deposits:
        d = ExpectedDeposit.from_chain(event.event_id, event.chain or {})
        rows.append((d.event_id, d.network, d.tx_hash, d.block_number, d.block_hash,
                     d.log_index, d.token_contract, d.recipient, str(d.raw_value),
                     json.dumps(event.chain, separators=(",", ":")), event.user_id,
                     event.asset, format_amount(event.amount), trace_id))
    cur.executemany(
        "INSERT INTO chain_deposits (event_id, network, tx_hash, block_number, block_hash,"
        " log_index, token_contract, recipient, raw_value, chain, user_id, asset, amount,"
        " trace_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (event_id) DO NOTHING", rows)


def credit(cur: Cursor, event_ids: Iterable[str]) -> None:
    """crediting -> credited (the watcher re-checks it every tick until final)."""
    wanted = sorted(set(event_ids))
    if wanted:
        cur.execute("UPDATE chain_deposits SET state = 'credited', credited_at = now()"
                    " WHERE event_id = ANY(%s) AND state = 'crediting'", (wanted,))


def settle(cur: Cursor, settlements: Sequence[PaymentEvent], state: DepositState) -> None:
    """Each settlement's deposit to `state` (final, reorged or reversed), with the block
    it is final in or the reason it is not. A deposit already in a terminal state is
    left alone: a settlement applies once."""
    if state not in TERMINAL_STATES:
        raise ValueError(f"the ledger settles a deposit as final, reorged or reversed, "
                         f"not {state}")
    rows = []
    for event in settlements:
        chain: Mapping[str, object] = event.chain or {}
        rows.append((state.value, chain.get("block_number"), chain.get("block_hash"),
                     chain.get("log_index"), chain.get("reason"), event.settles))
    if rows:
        cur.executemany(
            "UPDATE chain_deposits SET state = %s, settled_at = now(),"
            " final_block_number = coalesce(%s, final_block_number),"
            " final_block_hash = coalesce(%s, final_block_hash),"
            " final_log_index = coalesce(%s, final_log_index),"
            " verdict_reason = coalesce(%s, verdict_reason)"
            " WHERE event_id = %s AND state NOT IN ('final', 'reorged', 'reversed')", rows)


# --- the watcher's moves, in the transaction that writes the settlement event ---------

def decide(cur: Cursor, event_id: str, state: DepositState, *,
           from_states: Sequence[DepositState], reason: str | None,
           transfer_key: str | None, final_block: tuple[int, str] | None,
           final_log_index: int | None) -> DecidedDeposit | None:
    """Move the deposit from one of `from_states` to the watcher's decision `state`
    (finalizing, reorging, crediting or reversing); None if it was no longer in one of
    them (decided by an earlier, committed tick: emit nothing).

    `transfer_key` claims the on-chain transfer the deposit is credited as (the partial
    unique index refuses a second claim); a reversal frees it: the transfer is gone.
    `final_block` (number, hash) and `final_log_index`: where a FINAL verdict found it.
    """
    if state not in (DepositState.FINALIZING, DepositState.REORGING,
                     DepositState.CREDITING, DepositState.REVERSING):
        raise ValueError(f"the watcher decides finalizing, reorging, crediting or "
                         f"reversing, not {state}")
    cur.execute(
        "UPDATE chain_deposits SET state = %s, decided_at = now(),"
        " transfer_key = CASE WHEN %s THEN NULL ELSE coalesce(%s, transfer_key) END,"
        " verdict_reason = %s,"
        " final_block_number = %s, final_block_hash = %s, final_log_index = %s"
        " WHERE event_id = %s AND state = ANY(%s)"
        " RETURNING user_id, asset, amount, trace_id",
        (state.value, state is DepositState.REVERSING, transfer_key, reason,
         final_block[0] if final_block else None, final_block[1] if final_block else None,
         final_log_index, event_id, [s.value for s in from_states]))
    row = cur.fetchone()
    return None if row is None else DecidedDeposit(row[0], row[1], row[2], row[3])


# Decided by the watcher, the settlement it emitted not yet applied by the ledger.
AWAITING_SETTLEMENT = (DepositState.FINALIZING, DepositState.CREDITING,
                       DepositState.REORGING, DepositState.REVERSING)


def keep_settlement(cur: Cursor, event_id: str, wire: Mapping[str, object]) -> None:
    """Keep the settlement message just emitted for the deposit `decide` moved, in the
    same transaction: after a database failover it is published again from here
    (schema/republish.py; migration 0041)."""
    cur.execute("UPDATE chain_deposits SET settlement = %s WHERE event_id = %s",
                (json.dumps(wire), event_id))


def mark_missing(cur: Cursor, network: str, marks: Mapping[str, int | None]) -> None:
    """Set (or clear, with None) credited deposits' missing_since_block."""
    if marks:
        cur.executemany(
            "UPDATE chain_deposits SET missing_since_block = %s"
            " WHERE event_id = %s AND network = %s AND state = 'credited'",
            [(height, event_id, network) for event_id, height in sorted(marks.items())])


def mark_suspects(cur: Cursor, network: str) -> int:
    """pending -> suspect for deposits a provider announced a reorg for: a `reorg`
    notice on their event id (log.removed=true, or the transfer re-mined in another
    block), or another deposit reported in the same block number with another block
    hash. Returns how many were marked now."""
    cur.execute(
        "UPDATE chain_deposits c SET state = 'suspect', suspect_reason = n.reason"
        " FROM ingest_notices n WHERE c.network = %s AND c.state = 'pending'"
        " AND n.kind = 'reorg' AND n.event_id = c.event_id", (network,))
    marked = max(int(cur.rowcount), 0)
    cur.execute(
        "UPDATE chain_deposits c SET state = 'suspect',"
        " suspect_reason = 'block_rehashed'"
        " WHERE c.network = %s AND c.state = 'pending' AND c.block_hash IS NOT NULL"
        " AND EXISTS (SELECT 1 FROM chain_deposits o WHERE o.network = c.network"
        "  AND o.block_number = c.block_number AND o.block_hash IS NOT NULL"
        "  AND o.block_hash <> c.block_hash)", (network,))
    return marked + max(int(cur.rowcount), 0)
