"""Events applied before whose outcome housekeeping forgot (handler.py step 4): their
effect is on record, so they are never applied again; the outcome they had is written
back (a rejection stays a rejection: a replay cannot turn it into a success)."""

from __future__ import annotations

from collections.abc import Sequence

from paystream.consumers.ledger import settlements
from paystream.consumers.ledger.plan import Candidate
from paystream.schema.chain_deposits import HeldDeposit
from paystream.schema.db import Cursor
from paystream.schema.events import PaymentEvent, SettlementType
from paystream.schema.pgarray import text_array
from paystream.schema.processed_events import Outcome


def effects_on_record(cur: Cursor, candidates: Sequence[Candidate],
                       deposits: dict[str, HeldDeposit], statuses: dict[str, str]
                       ) -> list[tuple[Candidate, Outcome]]:
    """Events whose effect is on record (a transfer, a final or waiting status, or -
    for a settlement - its deposit already in the state it leads to), each with the
    outcome it had: applied before. If housekeeping purged their outcome row it is
    written back (the claim skips those whose row still exists); nothing is applied
    again, and a rejection stays a rejection (a replay cannot turn it into a success).
    `statuses`: the processed status of the batch's events that have one, as step 2
    read it (a status another applier commits after that read is caught by the claim:
    its outcome row commits with it)."""
    if not candidates:
        return []
    # An event with a stored row gets its status in the transaction that writes its
    # transfer, so its status says it all. Settlements have no row: their transfers are
    # looked up too (with their deposit's state, below).
    settling = sorted({c.event.event_id for c in candidates if c.event.settles is not None})
    moved: set[tuple[str, str]] = set()
    if settling:
        cur.execute("SELECT source_event_id, event_type FROM transfers"
                    " WHERE source_event_id = ANY(%s::text[])", (text_array(settling),))
        moved = set(cur.fetchall())
    on_record: dict[str, str | None] = {
        c.key: statuses.get(c.event.event_id) for c in candidates
        if c.event.event_id in statuses
        or (c.event.event_id, c.event.event_type.value) in moved}
    on_record.update(settlements.on_record(cur, candidates, deposits))
    if not on_record:
        return []
    found = []
    for c in candidates:
        if c.key in on_record:
            found.append((c, _outcome_it_had(c.event, on_record[c.key])))
    return found


def _outcome_it_had(event: PaymentEvent, status: str | None) -> Outcome:
    """The outcome of an event already applied, from its status (a chain deposit's
    follows its status: pending_finality, then applied / reorged / reversed once
    settled) or from its settlement's deposit (settlements.on_record)."""
    if event.is_chain_deposit:
        return {"applied": Outcome.APPLIED, "reorged": Outcome.REORGED,
                "reversed": Outcome.REVERSED}.get(status or "", Outcome.PENDING_FINALITY)
    if event.event_type is SettlementType.DEPOSIT_REORGED:
        return Outcome.REORGED
    if isinstance(event.event_type, SettlementType) and status is not None:
        return Outcome(status)
    if status == "rejected":
        return Outcome.INSUFFICIENT_FUNDS
    return Outcome.APPLIED
