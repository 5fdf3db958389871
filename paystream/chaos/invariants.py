"""What must hold after a chaos run, checked against the database for every request the
harness sent and the answer it got."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from paystream.chaos.chain import DROPPED, LATE, SENT, ChainDeposit, landed
from paystream.chaos.forgery import Forgery
from paystream.chaos.traffic import (
    ASSETS,
    MONEY,
    NEW_EVENTS,
    UNKNOWN_USER,
    UNKNOWN_USER_CODE,
    Kind,
    Request,
)
from paystream.consumers.ledger.conservation import find_transfer_problems, unbalanced_assets
from paystream.schema.db import Cursor, one_row
from paystream.schema.idempotency import idempotency_key
from paystream.schema.processed_events import Outcome

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
    # The chain deposits counted from what the run sent on chain (check_chain).
    chain: Counter[str] = field(default_factory=Counter)
    # The run's invoices counted by the standing the sender's record gives them
    # (chaos/invoices.py check_invoices).
    invoices: Counter[str] = field(default_factory=Counter)

    @property
    def passed(self) -> bool:
        return not (self.lost or self.double_applied or self.violations)


def accepted_events(sent: list[Request]) -> dict[str, Request]:
    """Event id -> the first request that got it accepted (2xx), new events only (a
    deposit for an unknown user among them if the ingest let it in)."""
    out: dict[str, Request] = {}
    for req in sent:
        if (req.kind in NEW_EVENTS or req.kind in UNKNOWN_USER) and ok(req):
            out.setdefault(req.event_id, req)
    return out


@dataclass
class ExpectedBooks:
    """What the ledger must have done, recomputed from the sender's record alone."""

    outcomes: dict[str, str] = field(default_factory=dict)        # event id -> outcome
    balances: dict[tuple[str, str], Decimal] = field(default_factory=dict)  # user, asset
    held: dict[tuple[str, str], Decimal] = field(default_factory=dict)      # user, asset
    # The available-book entries each event must have written: [] or [(user, asset, delta)].
    entries: dict[str, list[JournalRow]] = field(default_factory=dict)


JournalRow = tuple[str, str, Decimal]  # user, asset, delta


def expected_books(sent: list[Request]) -> ExpectedBooks:
    """Replay each user's accepted events in the order their answers came back (the
    order the ledger applies them in, see chaos.sender), by the rules of docs/ledger.md
    written out again here: a deposit always credits; a debit or a hold applies iff
    available covers it and the user is not flagged; a close needs its hold open (a
    settle pays the hold out of held, a failure puts it back); a refund takes back at
    most what is left of its deposit, and what available cannot cover is a shortfall
    that flags the user."""
    books = ExpectedBooks()
    moves = [r for r in accepted_events(sent).values() if r.kind in MONEY]
    open_holds: dict[str, Decimal] = {}   # hold id -> amount, applied and not closed
    refundable: dict[str, Decimal] = {}   # deposit id -> what is left of it
    flagged: set[str] = set()
    for req in sorted(moves, key=lambda r: r.answered_seq or 0):
        key = (req.user_id, req.asset)
        balance = books.balances.get(key, Decimal(0))
        amount = Decimal(req.amount)
        outcome, delta = _replay(req, amount, balance, open_holds, refundable, flagged)
        books.outcomes[req.event_id] = outcome.value
        books.entries[req.event_id] = [(req.user_id, req.asset, delta)] if delta else []
        if delta:
            books.balances[key] = balance + delta
        if outcome is Outcome.APPLIED and req.event_type == "deposit":
            refundable[req.event_id] = amount
        held = books.held.get(key, Decimal(0))
        if outcome is Outcome.APPLIED and req.kind is Kind.HOLD:
            open_holds[req.event_id] = amount
            books.held[key] = held + amount
        elif outcome is Outcome.APPLIED and req.kind is Kind.CLOSE:
            books.held[key] = held - amount
    return books


def _replay(req: Request, amount: Decimal, balance: Decimal, open_holds: dict[str, Decimal],
            refundable: dict[str, Decimal], flagged: set[str]) -> tuple[Outcome, Decimal]:
    """One event's outcome and its available-book delta."""
    kind = req.event_type
    if kind == "deposit":
        return Outcome.APPLIED, amount
    if req.kind is Kind.CLOSE:
        if open_holds.pop(req.reference or "", None) is None:
            return Outcome.HOLD_NOT_OPEN, Decimal(0)
        return Outcome.APPLIED, (amount if kind == "withdrawal_failed" else Decimal(0))
    if req.kind is Kind.REFUND:
        left = refundable.get(req.reference or "")
        if left is None:
            return Outcome.INVALID_REVERSAL, Decimal(0)
        if amount > left:
            return Outcome.EXCEEDS_ORIGINAL, Decimal(0)
        refundable[req.reference or ""] = left - amount
        if balance >= amount:
            return Outcome.APPLIED, -amount
        flagged.add(req.user_id)
        return Outcome.SHORTFALL, -balance
    if req.user_id in flagged:
        return Outcome.ACCOUNT_FLAGGED, Decimal(0)
    if balance >= amount:
        return Outcome.APPLIED, -amount
    return Outcome.INSUFFICIENT_FUNDS, Decimal(0)


def pending_count(cur: Cursor, sent: list[Request]) -> int:
    """Accepted events without a final status yet."""
    accepted = accepted_events(sent)
    cur.execute("SELECT count(*) FROM event_status WHERE event_id = ANY(%s)"
                " AND status = ANY(%s)", (list(accepted), list(FINAL_STATUSES)))
    return len(accepted) - _count(cur)


def applied_times(cur: Cursor, sent: list[Request]) -> list[float]:
    """When the ledger applied each of the run's accepted events (its batch transaction's
    start, processed_events.processed_at, as epoch seconds), sorted: the stalls are the
    gaps in it."""
    cur.execute("SELECT extract(epoch FROM processed_at)::float8 FROM processed_events"
                " WHERE event_id = ANY(%s) ORDER BY 1", (list(accepted_events(sent)),))
    return [float(row[0]) for row in cur.fetchall()]


# The dead letter each kind of forged record must end as (a replayed copy of a real
# event is a duplicate, never a dead letter).
FORGED_DEAD_LETTER = {"unknown": "unknown_event", "altered": "content_mismatch"}


def forged_pending_count(cur: Cursor, forged: Sequence[Forgery]) -> int:
    """Forged records whose dead letter is not in dead_letter_queue yet."""
    wanted = [(f.event_id, FORGED_DEAD_LETTER[f.kind]) for f in forged
              if f.kind in FORGED_DEAD_LETTER]
    if not wanted:
        return 0
    cur.execute("SELECT count(*) FROM unnest(%s::text[], %s::text[]) AS w(e, r)"
                " WHERE NOT EXISTS (SELECT 1 FROM dead_letter_queue d"
                " WHERE d.event_id = w.e AND d.error_reason = w.r)",
                ([e for e, _ in wanted], [r for _, r in wanted]))
    return _count(cur)


def check(cur: Cursor, sent: list[Request], users: list[str],
          forged: Sequence[Forgery] = ()) -> InvariantReport:
    v = InvariantReport()
    accepted = accepted_events(sent)
    ids = list(accepted)
    # LEFT JOIN: what was written is the payment_events row, with its status or not.
    cur.execute("SELECT event_id, status, amount FROM payment_events"
                " LEFT JOIN event_status USING (event_id) WHERE event_id = ANY(%s)",
                (ids + [r.event_id for r in sent
                        if r.kind in (Kind.INVALID, Kind.CONFLICT, *UNKNOWN_USER)],))
    rows = {r[0]: (r[1], r[2]) for r in cur.fetchall()}
    cur.execute("SELECT idempotency_key, outcome FROM processed_events"
                " WHERE event_id = ANY(%s)", (ids,))
    outcomes = dict(cur.fetchall())
    cur.execute("SELECT source_event_id, user_id, asset, delta FROM user_entries"
                " WHERE book = 'available' AND source_event_id = ANY(%s)",
                (ids + [f.event_id for f in forged],))
    journal: dict[str, list[JournalRow]] = {}
    for event_id, user, asset, delta in cur.fetchall():
        journal.setdefault(event_id, []).append((user, asset, delta))
    cur.execute("SELECT event_id, error_reason FROM dead_letter_queue WHERE event_id LIKE %s",
                (ids[0].rsplit("-e", 1)[0] + "-%" if ids else "-",))
    dead: dict[str, set[str]] = {}
    for event_id, reason in cur.fetchall():
        dead.setdefault(event_id, set()).add(reason)
    books = expected_books(sent)

    for event_id, req in accepted.items():
        if event_id not in rows:
            v.lost.append(f"{event_id}: answered {req.status} but not in payment_events")
            continue
        status, amount = rows[event_id]
        entries = journal.get(event_id, [])
        if len(entries) > 1:
            v.double_applied.append(f"{event_id}: {len(entries)} journal rows")
        if req.kind in UNKNOWN_USER:
            continue  # _check_unknown_users
        outcome = outcomes.get(idempotency_key(event_id, req.event_type))
        v.outcomes[outcome or "none"] += 1
        if outcome is None or status not in ("applied", "rejected"):
            v.lost.append(f"{event_id}: status {status}, outcome {outcome}")
            continue
        if outcome != books.outcomes[event_id]:
            v.violations.append(f"{event_id}: {outcome}, but the sender's record in "
                                f"{req.user_id}'s order says {books.outcomes[event_id]}")
        expected = books.entries[event_id]
        if entries != expected:
            v.violations.append(f"{event_id}: {outcome} with available entries {entries},"
                                f" the sender's record says {expected}")
        if Outcome(outcome).is_rejection and status != "rejected":
            v.violations.append(f"{event_id}: {outcome} but status {status}")
        if amount != Decimal(req.amount):
            v.violations.append(f"{event_id}: stored amount {amount} != sent {req.amount}")

    _check_answers(v, sent, rows)
    _check_forged(v, forged, dead, journal)
    _check_never_credited(cur, v, [r for r in sent if r.kind is Kind.HOSTILE_CHAIN])
    _check_unknown_users(cur, v, [r for r in sent if r.kind in UNKNOWN_USER], rows,
                         outcomes, journal)
    stray = set(dead) - {f.event_id for f in forged if f.kind != "replayed"}
    if stray:
        v.violations.append(f"{len(stray)} events dead-lettered that were not forged "
                            f"records, e.g. {sorted(stray)[:3]}")
    _check_balances(cur, v, users, books)
    _check_conservation(cur, v, users)
    return v


def _check_answers(v: InvariantReport, sent: list[Request],
                   rows: dict[str, tuple[str | None, Decimal]]) -> None:
    """What each request was answered: new events accepted, invalid ones refused and
    never written, conflicts 409, hostile chain deliveries 200, redeliveries duplicate."""
    for req in sent:
        if req.kind in NEW_EVENTS and not ok(req):
            v.violations.append(f"{req.kind} {req.event_id} ({req.extra.get('flavour', '')})"
                                f" answered {req.status} {req.answer}")
        elif req.kind is Kind.INVALID:
            if req.status is None or not 400 <= req.status < 500:
                v.violations.append(f"invalid request {req.event_id} answered {req.status}")
            if req.event_id in rows:
                v.violations.append(f"invalid request {req.event_id} was written")
        elif req.kind is Kind.CONFLICT:
            if req.status != 409:
                v.violations.append(f"conflict {req.event_id} answered {req.status}")
        elif req.kind is Kind.HOSTILE_CHAIN and req.status != 200:
            v.violations.append(f"hostile Alchemy delivery ({req.extra['flavour']}) "
                                f"answered {req.status} {req.answer}, want 200")
        elif req.kind is Kind.REDELIVERY and not (ok(req) and req.answer == "duplicate"):
            v.violations.append(f"redelivery {req.event_id} answered {req.status} "
                                f"{req.answer}")
        elif req.status is None:
            v.violations.append(f"{req.kind} {req.event_id} never answered")



def _check_forged(v: InvariantReport, forged: Sequence[Forgery], dead: dict[str, set[str]],
                  journal: dict[str, list[JournalRow]]) -> None:
    """A forged record never moves money (the journal rows of real events are checked
    against what was sent above); an unknown event is a dead letter saying so."""
    for f in forged:
        v.outcomes[f"forged_{f.kind}"] += 1
        if f.kind == "unknown":
            if journal.get(f.event_id):
                v.violations.append(f"forged {f.event_id} was credited: {journal[f.event_id]}")
            if dead.get(f.event_id) != {FORGED_DEAD_LETTER["unknown"]}:
                v.violations.append(f"forged {f.event_id}: dead letters "
                                    f"{dead.get(f.event_id)}, want unknown_event")
        elif f.kind == "altered" and dead.get(f.event_id) != {FORGED_DEAD_LETTER["altered"]}:
            v.violations.append(f"altered copy of {f.event_id}: dead letters "
                                f"{dead.get(f.event_id)}, want content_mismatch")
        elif f.kind == "replayed" and f.event_id in dead:
            v.violations.append(f"replayed copy of {f.event_id} dead-lettered: "
                                f"{dead[f.event_id]}")


def _check_unknown_users(cur: Cursor, v: InvariantReport, ghosts: list[Request],
                         rows: dict[str, tuple[str, Decimal]], outcomes: dict[str, str],
                         journal: dict[str, list[JournalRow]]) -> None:
    """A deposit for a user nobody created is refused (422 unknown_user, nothing
    written) or, if the ingest let it in, rejected by the ledger as unknown_user: never
    credited, never a balance, never a dead letter (checked with every other one)."""
    for req in ghosts:
        if req.status == 422 and req.answer == UNKNOWN_USER_CODE:
            v.outcomes["refused_unknown_user"] += 1
            if req.event_id in rows:
                v.violations.append(f"{req.kind} {req.event_id} refused but written "
                                    f"({rows[req.event_id][0]})")
        elif ok(req):
            status = rows.get(req.event_id, ("missing", Decimal(0)))[0]
            outcome = outcomes.get(idempotency_key(req.event_id, req.event_type))
            v.outcomes[outcome or "none"] += 1
            if status != "rejected" or outcome != UNKNOWN_USER_CODE:
                v.violations.append(f"{req.kind} {req.event_id} for unknown user "
                                    f"{req.user_id} accepted, then {status}/{outcome}")
        elif req.status is not None:
            v.violations.append(f"{req.kind} {req.event_id} for unknown user answered "
                                f"{req.status} {req.answer}, want 422 {UNKNOWN_USER_CODE}")
        if journal.get(req.event_id):
            v.violations.append(f"{req.kind} {req.event_id} for unknown user was credited:"
                                f" {journal[req.event_id]}")
    cur.execute("SELECT user_id, asset, balance FROM balances WHERE user_id = ANY(%s)",
                (sorted({r.user_id for r in ghosts}),))
    for user, asset, balance in cur.fetchall():
        v.violations.append(f"unknown user {user} has a balance: {balance} {asset}")


def _check_never_credited(cur: Cursor, v: InvariantReport, hostile: list[Request]) -> None:
    """A hostile Alchemy delivery's transaction (its request's event id) is never held
    as a deposit nor recorded as an event."""
    txs = [r.event_id for r in hostile]
    cur.execute("SELECT tx_hash FROM chain_deposits WHERE tx_hash = ANY(%s) UNION ALL"
                " SELECT event_id FROM payment_events WHERE provider = 'alchemy'"
                " AND split_part(event_id, ':', 2) = ANY(%s)", (txs, txs))
    for (found,) in cur.fetchall():
        v.violations.append(f"hostile Alchemy delivery was recorded: {found}")
    v.outcomes["hostile_chain_ignored"] += len(txs)


def _check_conservation(cur: Cursor, v: InvariantReport, users: list[str]) -> None:
    """Double entry held: every transfer of the run's users sums to zero, and so does
    every asset over the whole ledger (the zero-sum check the run ends with)."""
    for p in find_transfer_problems(cur, users) + unbalanced_assets(cur):
        v.violations.append(f"transfer {p.transfer_id} {p.asset}: {p.problem} ({p.detail})")


def _check_balances(cur: Cursor, v: InvariantReport, users: list[str],
                    books: ExpectedBooks) -> None:
    """Each (user, asset) balance equals both its journal and the sender's replay."""
    cur.execute(
        "SELECT b.user_id, b.asset, b.balance, coalesce(sum(j.delta), 0) FROM balances b"
        " LEFT JOIN user_entries j ON j.user_id = b.user_id AND j.asset = b.asset"
        " AND j.book = 'available'"
        " WHERE b.user_id = ANY(%s) GROUP BY b.user_id, b.asset, b.balance", (users,))
    found = {}
    for user, asset, balance, total in cur.fetchall():
        found[(user, asset)] = balance
        if balance != total or balance < 0:
            v.violations.append(f"balance {user}/{asset} = {balance}, journal sum {total}")
    for key in sorted(set(found) | set(books.balances)):
        have, want = found.get(key, Decimal(0)), books.balances.get(key, Decimal(0))
        # Chain assets are credited at finality: check_chain replays those.
        if key[0] in users and key[1] in ASSETS and have != want:
            v.violations.append(f"balance {key[0]}/{key[1]} = {have}, the sender's record "
                                f"says {want}")
    # Withdrawals in flight: what the holds still open hold, and nothing else.
    cur.execute("SELECT user_id, asset, held FROM balances WHERE user_id = ANY(%s)"
                " AND held <> 0", (users,))
    held = {(u, a): h for u, a, h in cur.fetchall()}
    for key in sorted(set(held) | {k for k, h in books.held.items() if h}):
        if held.get(key, Decimal(0)) != books.held.get(key, Decimal(0)):
            v.violations.append(f"held {key[0]}/{key[1]} = {held.get(key, 0)}, the sender's"
                                f" record says {books.held.get(key, 0)}")


# --- chain deposits -------------------------------------------------------------------

CHAIN_FINAL_STATUSES = ("applied", "reorged")


def due_chain(deposits: list[ChainDeposit], on_chain: set[str]) -> list[str]:
    """The event ids the pipeline must settle: each deposit whose webhook the ingest
    accepted, and each transfer on the chain (`on_chain`: tx hashes), webhook or not (the
    scanner reads every final block)."""
    return [d.event_id for d in deposits
            if d.event_id and (d.accepted or d.tx_hash in on_chain)]


def chain_pending_count(cur: Cursor, due: list[str]) -> int:
    """Chain deposits due (due_chain) the ledger has not yet credited or released."""
    cur.execute("SELECT count(*) FROM event_status WHERE event_id = ANY(%s)"
                " AND status = ANY(%s)", (due, list(CHAIN_FINAL_STATUSES)))
    return len(due) - _count(cur)


def check_chain(cur: Cursor, v: InvariantReport, deposits: list[ChainDeposit],
                receipt: Callable[[str], dict[str, Any] | None]) -> None:
    """Every transfer the run sent that is on the chain now is credited exactly once,
    under the block it is in, whether its webhook was sent, dropped or sent late (the
    count starts from the chain's receipts, not from our tables); every other one is
    reorged or never recorded, and never credited; the pending book is empty and
    matches its journal."""
    chain_now = {d.tx_hash: r for d in deposits if landed(r := receipt(d.tx_hash))}
    mine = {d.event_id: d for d in deposits if d.event_id}
    ids = list(mine)
    cur.execute("SELECT event_id, state, final_block_hash, amount FROM chain_deposits"
                " WHERE event_id = ANY(%s)", (ids,))
    held = {r[0]: r[1:] for r in cur.fetchall()}
    cur.execute("SELECT event_id, status FROM event_status WHERE event_id = ANY(%s)",
                (ids,))
    status = dict(cur.fetchall())
    # The deposit itself only moves the pending book; its settlement moves available.
    sources = {s: e for e in ids for s in (e, f"{e}:finalized", f"{e}:reorged")}
    cur.execute("SELECT source_event_id, delta FROM user_entries"
                " WHERE book = 'available' AND source_event_id = ANY(%s)", (list(sources),))
    credits: dict[str, list[Decimal]] = {}
    for source, delta in cur.fetchall():
        credits.setdefault(sources[source], []).append(delta)
    landed_sum: dict[tuple[str, str], Decimal] = {}
    for event_id, d in mine.items():
        on_chain = chain_now.get(d.tx_hash)
        got = credits.get(event_id, [])
        if on_chain is not None:
            _tally_chain(v, d, got)
        if d.answered_id is not None and d.answered_id != event_id:
            v.violations.append(f"chain {d.tx_hash}: the ingest named it {d.answered_id}, "
                                f"the scanner names it {event_id}")
        if event_id not in held:
            if on_chain is not None or d.accepted:
                v.lost.append(f"chain {event_id}: answered {d.status} (webhook {d.webhook})"
                              f"{', on chain' if on_chain else ''}, never held as pending")
            elif got:
                v.violations.append(f"chain {event_id}: never recorded, credits {got}")
            continue
        state, final_hash, amount = held[event_id]
        v.outcomes[f"chain_{state}"] += 1
        if amount != d.amount:
            v.violations.append(f"chain {event_id}: held {amount}, sent {d.amount}")
        if len(got) > 1:
            v.double_applied.append(f"chain {event_id}: credited {len(got)} times")
        if on_chain is not None:
            key = (d.user_id, event_id.split(":", 1)[0] + ":native")
            landed_sum[key] = landed_sum.get(key, Decimal(0)) + d.amount
            if state != "final" or status.get(event_id) != "applied" or got != [d.amount]:
                v.lost.append(f"chain {event_id}: on chain but {state}/"
                              f"{status.get(event_id)}, credits {got}")
            elif final_hash != on_chain["blockHash"].lower():
                v.violations.append(f"chain {event_id}: final in {final_hash}, the chain "
                                    f"has it in {on_chain['blockHash']}")
        elif state != "reorged" or status.get(event_id) != "reorged" or got:
            v.violations.append(f"chain {event_id}: not on chain but {state}/"
                                f"{status.get(event_id)}, credits {got}")
        if d.webhook == LATE and on_chain is not None and d.late_answer != "200:duplicate":
            v.violations.append(f"chain {event_id}: its webhook after the scanner's credit"
                                f" answered {d.late_answer}, not 200 duplicate")
    for d in deposits:
        bad = [a for a in d.redelivered_as if not a.startswith("2")]
        if d.accepted and bad:
            v.violations.append(f"chain {d.event_id}: redelivery answered {bad}")
    _check_chain_books(cur, v, sorted({d.user_id for d in deposits}), landed_sum)


def _check_chain_books(cur: Cursor, v: InvariantReport, users: list[str],
                       landed_sum: dict[tuple[str, str], Decimal]) -> None:
    """Available per user: exactly the deposits the chain holds now, from the chain's
    own receipts (not from what the pipeline recorded); the pending book empty."""
    cur.execute("SELECT user_id, asset, balance FROM balances WHERE user_id = ANY(%s)"
                " AND asset = ANY(%s)", (users, sorted({a for _u, a in landed_sum})))
    found = {(u, a): b for u, a, b in cur.fetchall()}
    for key in sorted(set(found) | set(landed_sum)):
        if found.get(key, Decimal(0)) != landed_sum.get(key, Decimal(0)):
            v.violations.append(f"balance {key[0]}/{key[1]} = {found.get(key)}, the chain "
                                f"holds {landed_sum.get(key, Decimal(0))} for them")
    cur.execute(
        "SELECT b.user_id, b.asset, b.pending, coalesce(sum(j.delta), 0) FROM balances b"
        " LEFT JOIN user_entries j ON j.user_id = b.user_id AND j.asset = b.asset"
        " AND j.book = 'pending'"
        " WHERE b.user_id = ANY(%s) GROUP BY b.user_id, b.asset, b.pending", (users,))
    for user, asset, pending, total in cur.fetchall():
        if pending != 0 or total != 0:
            v.violations.append(f"pending {user}/{asset} = {pending}, journal sum {total} "
                                "after every deposit was settled")


def _tally_chain(v: InvariantReport, d: ChainDeposit, credits: list[Decimal]) -> None:
    """Count a transfer on the chain for the report: its webhook, and its credits."""
    v.chain["on_chain"] += 1
    v.chain[f"webhook_{d.webhook}"] += 1
    once = credits == [d.amount]
    v.chain["credited_once"] += once
    v.chain["twice"] += len(credits) > 1
    v.chain["missing"] += not credits
    if d.webhook != SENT:
        v.chain[f"{d.webhook}_credited_once"] += once


def chain_report_line(v: InvariantReport) -> str:
    """The chain deposits counted from the chain: how many, how many had no webhook (or
    a late one), and how each was credited."""
    c = v.chain
    return (f"chain transfers on chain: {c['on_chain']} (webhook dropped: "
            f"{c[f'webhook_{DROPPED}']}, sent late: {c[f'webhook_{LATE}']}), credited once: "
            f"{c['credited_once']}, twice: {c['twice']}, missing: {c['missing']}; "
            f"credited once with no webhook: {c[f'{DROPPED}_credited_once']}, "
            f"before their late webhook: {c[f'{LATE}_credited_once']}")
