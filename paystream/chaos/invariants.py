"""What must hold after a chaos run, checked against the database for every request the
harness sent and the answer it got."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from paystream.chaos.chain import ChainDeposit
from paystream.chaos.traffic import Kind, Request
from paystream.schema.db import Cursor, one_row
from paystream.schema.idempotency import idempotency_key

FINAL_STATUSES = ("applied", "rejected", "dead_lettered")


def _count(cur: Cursor) -> int:
    """The answer of a SELECT count(*) just executed."""
    return int(one_row(cur)[0])


def ok(req: Request) -> bool:
    return req.status is not None and 200 <= req.status < 300


@dataclass
class InvariantReport:
    """What checking the run's invariants found: events lost or applied twice, any other
    broken rule, and the final outcomes counted. The run passes with nothing found."""

    lost: list[str] = field(default_factory=list)
    double_applied: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)

    @property
    def passed(self) -> bool:
        return not (self.lost or self.double_applied or self.violations)


def accepted_events(sent: list[Request]) -> dict[str, Request]:
    """Event id -> the first request that got it accepted (2xx), new events only."""
    out: dict[str, Request] = {}
    for req in sent:
        if req.kind in (Kind.DEPOSIT, Kind.WITHDRAWAL, Kind.POISON) and ok(req):
            out.setdefault(req.event_id, req)
    return out


def pending_count(cur: Cursor, sent: list[Request]) -> int:
    """Accepted events without a final status yet, plus poison not yet mirrored."""
    accepted = accepted_events(sent)
    cur.execute("SELECT count(*) FROM payment_events WHERE event_id = ANY(%s)"
                " AND status = ANY(%s)", (list(accepted), list(FINAL_STATUSES)))
    final = _count(cur)
    poison = [e for e, r in accepted.items() if r.kind is Kind.POISON]
    cur.execute("SELECT count(DISTINCT event_id) FROM dead_letter_queue"
                " WHERE event_id = ANY(%s)", (poison,))
    mirrored = _count(cur)
    return (len(accepted) - final) + (len(poison) - mirrored)


def check(cur: Cursor, sent: list[Request], users: list[str]) -> InvariantReport:
    v = InvariantReport()
    accepted = accepted_events(sent)
    ids = list(accepted)
    cur.execute("SELECT event_id, status, amount FROM payment_events WHERE event_id = ANY(%s)",
                (ids + [r.event_id for r in sent if r.kind in (Kind.INVALID, Kind.CONFLICT)],))
    rows = {r[0]: (r[1], r[2]) for r in cur.fetchall()}
    cur.execute("SELECT idempotency_key, outcome FROM processed_events"
                " WHERE event_id = ANY(%s)", (ids,))
    outcomes = dict(cur.fetchall())
    cur.execute("SELECT source_event_id, event_type, delta FROM balance_events"
                " WHERE source_event_id = ANY(%s)", (ids,))
    journal: dict[str, list[Decimal]] = {}
    for event_id, _type, delta in cur.fetchall():
        journal.setdefault(event_id, []).append(delta)
    cur.execute("SELECT DISTINCT event_id FROM dead_letter_queue WHERE event_id LIKE %s",
                (ids[0].rsplit("-e", 1)[0] + "-%" if ids else "-",))
    dead = {r[0] for r in cur.fetchall()}

    for event_id, req in accepted.items():
        if event_id not in rows:
            v.lost.append(f"{event_id}: answered {req.status} but not in payment_events")
            continue
        status, amount = rows[event_id]
        deltas = journal.get(event_id, [])
        if len(deltas) > 1:
            v.double_applied.append(f"{event_id}: {len(deltas)} journal rows")
        if req.kind is Kind.POISON:
            v.outcomes["dead_lettered"] += 1
            if status != "dead_lettered" or event_id not in dead or deltas:
                v.violations.append(f"{event_id}: poison ended {status}, in DLQ table: "
                                    f"{event_id in dead}, journal rows {len(deltas)}")
            continue
        outcome = outcomes.get(idempotency_key(event_id, req.event_type))
        v.outcomes[outcome or "none"] += 1
        if outcome is None or status not in ("applied", "rejected"):
            v.lost.append(f"{event_id}: status {status}, outcome {outcome}")
            continue
        expected = Decimal(req.amount) * (1 if req.event_type == "deposit" else -1)
        if outcome == "applied" and deltas != [expected]:
            v.violations.append(f"{event_id}: applied with journal {deltas}, want {expected}")
        if outcome == "insufficient_funds" and (deltas or status != "rejected"):
            v.violations.append(f"{event_id}: rejected but journal {deltas}, status {status}")
        if amount != Decimal(req.amount):
            v.violations.append(f"{event_id}: stored amount {amount} != sent {req.amount}")

    for req in sent:
        if req.kind is Kind.INVALID:
            if req.status is None or not 400 <= req.status < 500:
                v.violations.append(f"invalid request {req.event_id} answered {req.status}")
            if req.event_id in rows:
                v.violations.append(f"invalid request {req.event_id} was written")
        elif req.kind is Kind.CONFLICT:
            if req.status != 409:
                v.violations.append(f"conflict {req.event_id} answered {req.status}")
        elif req.kind is Kind.REDELIVERY and not (ok(req) and req.answer == "duplicate"):
            v.violations.append(f"redelivery {req.event_id} answered {req.status} "
                                f"{req.answer}")
        elif req.status is None:
            v.violations.append(f"{req.kind} {req.event_id} never answered")
    stray = dead - {e for e, r in accepted.items() if r.kind is Kind.POISON}
    if stray:
        v.violations.append(f"{len(stray)} events dead-lettered that were not poisoned, "
                            f"e.g. {sorted(stray)[:3]}")

    cur.execute(
        "SELECT b.user_id, b.asset, b.balance, coalesce(sum(j.delta), 0) FROM balances b"
        " LEFT JOIN balance_events j ON j.user_id = b.user_id AND j.asset = b.asset"
        " WHERE b.user_id = ANY(%s) GROUP BY b.user_id, b.asset, b.balance", (users,))
    for user, asset, balance, total in cur.fetchall():
        if balance != total or balance < 0:
            v.violations.append(f"balance {user}/{asset} = {balance}, journal sum {total}")
    return v


# --- chain deposits -------------------------------------------------------------------

CHAIN_FINAL_STATUSES = ("applied", "reorged")


def accepted_chain(deposits: list[ChainDeposit]) -> dict[str, ChainDeposit]:
    """Event id -> the deposit, for transfers whose delivery the ingest accepted."""
    return {d.event_id: d for d in deposits if d.accepted and d.event_id}


def chain_pending_count(cur: Cursor, deposits: list[ChainDeposit]) -> int:
    """Accepted chain deposits the ledger has not yet credited or released."""
    accepted = accepted_chain(deposits)
    cur.execute("SELECT count(*) FROM payment_events WHERE event_id = ANY(%s)"
                " AND status = ANY(%s)", (list(accepted), list(CHAIN_FINAL_STATUSES)))
    return len(accepted) - _count(cur)


def check_chain(cur: Cursor, v: InvariantReport, deposits: list[ChainDeposit],
                receipt: Callable[[str], dict[str, Any] | None]) -> None:
    """Every accepted deposit whose transfer is on the chain now is credited exactly once,
    under the block it is in; every other one is reorged and never credited; the
    pending book is empty and matches its journal."""
    accepted = accepted_chain(deposits)
    ids = list(accepted)
    cur.execute("SELECT event_id, state, final_block_hash, amount FROM chain_deposits"
                " WHERE event_id = ANY(%s)", (ids,))
    held = {r[0]: r[1:] for r in cur.fetchall()}
    cur.execute("SELECT event_id, status FROM payment_events WHERE event_id = ANY(%s)",
                (ids,))
    status = dict(cur.fetchall())
    # The deposit itself only moves the pending book; its settlement moves available.
    sources = {s: e for e in ids for s in (e, f"{e}:finalized", f"{e}:reorged")}
    cur.execute("SELECT source_event_id, delta FROM balance_events"
                " WHERE source_event_id = ANY(%s)", (list(sources),))
    credits: dict[str, list[Decimal]] = {}
    for source, delta in cur.fetchall():
        credits.setdefault(sources[source], []).append(delta)
    for event_id, d in accepted.items():
        if event_id not in held:
            v.lost.append(f"chain {event_id}: answered {d.status}, never held as pending")
            continue
        state, final_hash, amount = held[event_id]
        on_chain = receipt(d.tx_hash)
        landed = on_chain is not None and int(on_chain["status"], 16) == 1
        got = credits.get(event_id, [])
        v.outcomes[f"chain_{state}"] += 1
        if amount != d.amount:
            v.violations.append(f"chain {event_id}: held {amount}, sent {d.amount}")
        if len(got) > 1:
            v.double_applied.append(f"chain {event_id}: credited {len(got)} times")
        if landed and on_chain is not None:
            if state != "final" or status.get(event_id) != "applied" or got != [d.amount]:
                v.lost.append(f"chain {event_id}: on chain but {state}/"
                              f"{status.get(event_id)}, credits {got}")
            elif final_hash != on_chain["blockHash"].lower():
                v.violations.append(f"chain {event_id}: final in {final_hash}, the chain "
                                    f"has it in {on_chain['blockHash']}")
        elif state != "reorged" or status.get(event_id) != "reorged" or got:
            v.violations.append(f"chain {event_id}: not on chain but {state}/"
                                f"{status.get(event_id)}, credits {got}")
    for d in deposits:
        bad = [a for a in d.redelivered_as if not a.startswith("2")]
        if d.accepted and bad:
            v.violations.append(f"chain {d.event_id}: redelivery answered {bad}")
    users = sorted({d.user_id for d in deposits})
    cur.execute(
        "SELECT b.user_id, b.asset, b.pending, coalesce(sum(j.delta), 0) FROM balances b"
        " LEFT JOIN pending_events j ON j.user_id = b.user_id AND j.asset = b.asset"
        " WHERE b.user_id = ANY(%s) GROUP BY b.user_id, b.asset, b.pending", (users,))
    for user, asset, pending, total in cur.fetchall():
        if pending != 0 or total != 0:
            v.violations.append(f"pending {user}/{asset} = {pending}, journal sum {total} "
                                "after every deposit was settled")
