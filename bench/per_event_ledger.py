"""The per-event baseline of bench/ledger_bench.py: the ledger's work, one transaction per
event, in the seed article's style.

Per event it does what the batch ledger does for it, with the same rules and writers:
judge the record against its stored event (content hash, status) and its user, lock the
balance row (created on a first credit), decide (ledger_plan.decide), claim the outcome
(schema.processed_events), and for an event that moves money its transfer: the accounts
(schema.accounts.resolve), one transfers row and its postings (ledger_postings.postings,
summing to zero), the balances row; then the event's status and its notification intent
through the outbox (notify.intents, a record of one: an event alone has no batch
to share one with). Workers own disjoint users, as partitions do, each on its own
connection.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from paystream.consumers.ledger.plan import decide
from paystream.consumers.ledger.postings import postings
from paystream.notify import intents
from paystream.notify.seal import process_sealer
from paystream.schema import accounts, processed_events
from paystream.schema.db import Connection, connect, database_url
from paystream.schema.events import NOTIFICATIONS_AGGREGATE, PaymentEvent, parse_wire
from paystream.schema.idempotency import idempotency_key
from paystream.schema.outbox import publish
from paystream.schema.processed_events import Outcome
from paystream.schema.transfers import sql_amount


@dataclass(frozen=True)
class WorkerResult:
    events: int
    started: float  # time.time() of its first event
    finished: float
    cpu_s: float    # the worker's own user + system CPU


def apply_one(conn: Connection, event: PaymentEvent) -> Outcome | None:
    """One event in one transaction; None when it was not applied (a duplicate, or a
    record that does not match its stored event)."""
    cur = conn.cursor()
    cur.execute("SELECT content_hash, status FROM payment_events"
                " JOIN event_status USING (event_id) WHERE event_id = %s", (event.event_id,))
    stored = cur.fetchone()
    cur.execute("SELECT 1 FROM users WHERE user_id = %s", (event.user_id,))
    if stored is None or stored[0] != event.content_hash() or cur.fetchone() is None:
        conn.rollback()
        return None
    if event.event_type.is_credit:
        cur.execute("INSERT INTO balances (user_id, asset) VALUES (%s, %s)"
                    " ON CONFLICT DO NOTHING", (event.user_id, event.asset))
    cur.execute("SELECT balance FROM balances WHERE user_id = %s AND asset = %s FOR UPDATE",
                (event.user_id, event.asset))
    row = cur.fetchone()
    available = row[0] if row is not None else 0
    outcome = decide(event, available)
    key = idempotency_key(event.event_id, event.event_type.value)
    if processed_events.record(cur, [(key, event.event_id, event.event_type.value, outcome,
                                      None)]):
        conn.rollback()
        return None
    moved = postings(event, outcome, available)
    if moved:
        ids = accounts.resolve(cur, [ref for ref, _ in moved])
        cur.execute("INSERT INTO transfers (source_event_id, event_type) VALUES (%s, %s)"
                    " RETURNING transfer_id", (event.event_id, event.event_type.value))
        transfer_id = cur.fetchone()[0]
        cur.execute("INSERT INTO postings (transfer_id, account_id, asset, amount) VALUES "
                    + ", ".join(["(%s, %s, %s, %s)"] * len(moved)),
                    [v for ref, amount in moved
                     for v in (transfer_id, ids[ref], ref.asset, sql_amount(amount))])
        delta = sum(amount for ref, amount in moved if ref.kind.value == "available")
        cur.execute("UPDATE balances SET balance = balance + %s, updated_at = now()"
                    " WHERE user_id = %s AND asset = %s", (delta, event.user_id, event.asset))
    status = "applied" if outcome is Outcome.APPLIED else "rejected"
    cur.execute("UPDATE event_status SET status = %s, status_changed_at = now()"
                " WHERE event_id = %s AND status = 'received'", (status, event.event_id))
    intent = intents.of_outcome(event, outcome, intents.now_text())
    if intent is not None:
        publish(cur, NOTIFICATIONS_AGGREGATE, intents.outbox_batches(
            [(intent, "trace-" + event.event_id)], event.user_id, process_sealer()))
    conn.commit()
    return outcome


def _worker(values: Sequence[bytes], start: mp.Barrier, out: mp.Queue) -> None:
    conn = connect(database_url("ledger"), application_name="paystream-bench-baseline")
    events = [parse_wire(json.loads(v)) for v in values]
    start.wait()
    cpu0, began = os.times(), time.time()
    for event in events:
        apply_one(conn, event)
    finished, cpu1 = time.time(), os.times()
    conn.close()
    out.put(WorkerResult(len(events), began, finished,
                         (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)))


def run(values: Sequence[bytes], workers: int) -> tuple[float, float]:
    """(events/s, Python CPU seconds) of `workers` processes applying `values` one
    transaction per event, each worker the users whose hash lands on it."""
    shards: list[list[bytes]] = [[] for _ in range(workers)]
    for v in values:
        shards[hash(json.loads(v)["user_id"]) % workers].append(v)
    ctx = mp.get_context("fork")
    start, out = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(shard, start, out)) for shard in shards]
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    began = min(r.started for r in results)
    finished = max(r.finished for r in results)
    return (sum(r.events for r in results) / (finished - began),
            sum(r.cpu_s for r in results))
