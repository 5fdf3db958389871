"""Gateway events known not to apply: refused at the door (422) and recorded.

A gateway names the user itself, and may name another event (`hold_id`: the withdrawal
request a settlement or failure closes; `reverses`: the deposit a refund or chargeback
takes back). The ledger can only reject an event whose user does not exist, and one
whose reference is an event of another user (consumers/ledger/plan.py: a hold closes
only for its own user, a reversal only takes back its own user's credit). Accepted,
such events cost a write, a Kafka message and a ledger decision each, and a provider's
flood of them wedged the ledger. So the ingest answers them 422 with a code the
provider can act on (`unknown_user`, `reference_of_other_user`), writes nothing to
payment_events or the outbox, and keeps each refusal in refused_deliveries: one row per
(provider, event, code), a retry adds an attempt.

Only what is certain is refused: a reference not stored (yet) is let through, the
ledger judges it. Users are never deleted (balances, addresses and events reference
them), so a delivery refused as `unknown_user` is accepted once the user exists: a
provider that retries after the user was created loses nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import orjson

from paystream.ingest.errors import NotApplicableError
from paystream.schema.db import Cursor
from paystream.schema.events import PaymentEvent

UNKNOWN_USER = "unknown_user"
REFERENCE_OF_OTHER_USER = "reference_of_other_user"

# One statement for a whole group. Repeats of one key in a group arrive aggregated
# (`attempts` > 1): ON CONFLICT DO UPDATE may touch a row only once per statement.
RECORD = (
    "INSERT INTO refused_deliveries (provider, event_id, code, user_id, detail, trace_id,"
    " event, attempts)"
    " SELECT provider, event_id, code, user_id, detail, trace_id, event, attempts"
    " FROM jsonb_to_recordset(%s::jsonb) AS r(provider text, event_id text, code text,"
    " user_id text, detail text, trace_id text, event jsonb, attempts integer)"
    " ON CONFLICT (provider, event_id, code) DO UPDATE SET"
    " attempts = refused_deliveries.attempts + EXCLUDED.attempts,"
    " last_refused_at = now(), user_id = EXCLUDED.user_id, detail = EXCLUDED.detail,"
    " trace_id = EXCLUDED.trace_id, event = EXCLUDED.event")


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an event does not apply: `code` for machines, `detail` for the provider."""

    code: str
    detail: str

    def error(self, event_id: str) -> NotApplicableError:
        """The 422 the route answers with (raised only after the refusal was recorded:
        an error raised inside the delivery's savepoint would roll the record back)."""
        return NotApplicableError(self.detail, code=self.code, event_id=event_id)


@dataclass(frozen=True, slots=True)
class Known:
    """What the database says about a group's events, read before writing them."""

    users: frozenset[str]     # of the users the events name, those that exist
    owners: dict[str, str]    # referenced event id -> its user, for the stored ones


def look_up(cur: Cursor, events: Sequence[PaymentEvent]) -> Known:
    """The users and the referenced events' owners: one primary-key lookup for every
    user of the group, and one for the references when there are any (deposits, the
    bulk of the traffic, have none)."""
    cur.execute("SELECT user_id FROM users WHERE user_id = ANY(%s)",
                (sorted({e.user_id for e in events}),))
    users = frozenset(row[0] for row in cur.fetchall())
    references = sorted({e.reference for e in events if e.reference is not None})
    owners: dict[str, str] = {}
    if references:
        cur.execute("SELECT event_id, user_id FROM payment_events WHERE event_id = ANY(%s)",
                    (references,))
        owners = dict(cur.fetchall())
    return Known(users, owners)


def judge(events: Iterable[PaymentEvent], known: Known) -> list[Refusal | None]:
    """Each event's refusal, or None to write it, in order, as if each were written
    alone after the ones before it: an event not refused is stored by then, so a later
    event of the group that names it sees its owner (unless an event of that id was
    stored already: the stored one stands, the new one is a duplicate or a conflict)."""
    owners = dict(known.owners)
    verdicts: list[Refusal | None] = []
    for event in events:
        verdict = _refusal(event, event.user_id in known.users,
                           owners.get(event.reference) if event.reference else None)
        if verdict is None:
            owners.setdefault(event.event_id, event.user_id)
        verdicts.append(verdict)
    return verdicts


def _refusal(event: PaymentEvent, user_exists: bool, reference_owner: str | None
             ) -> Refusal | None:
    if not user_exists:
        return Refusal(UNKNOWN_USER,
                       f"user {event.user_id!r} does not exist; create it first (merchant"
                       " API POST /v1/users, or `paystream users add`), then send this"
                       " event again")
    if reference_owner is not None and reference_owner != event.user_id:
        # The other user is not named: the provider learns only that it is not theirs.
        return Refusal(REFERENCE_OF_OTHER_USER,
                       f"{event.event_type.reference_field} {event.reference!r} names an"
                       f" event of another user, not of {event.user_id!r}")
    return None


def record(cur: Cursor, refused: Sequence[tuple[PaymentEvent, str, Refusal]]) -> None:
    """Record (event, trace id, refusal) triples in one statement, with the rows and
    attempts of recording each alone, in order (the latest attempt's fields win)."""
    rows: dict[tuple[str, str, str], dict[str, object]] = {}
    attempts: dict[tuple[str, str, str], int] = {}
    for event, trace_id, refusal in refused:
        key = (event.provider, event.event_id, refusal.code)
        attempts[key] = attempts.get(key, 0) + 1
        rows[key] = {"provider": event.provider, "event_id": event.event_id,
                     "code": refusal.code, "user_id": event.user_id,
                     "detail": refusal.detail, "trace_id": trace_id,
                     "event": event.to_wire(), "attempts": attempts[key]}
    if rows:
        cur.execute(RECORD, (orjson.dumps(list(rows.values())).decode(),))


def latest(cur: Cursor, code: str | None = None, user_id: str | None = None,
           limit: int = 50) -> list[tuple[str, ...]]:
    """The latest refused deliveries, newest first, as text cells (last refused, provider,
    code, user, event, attempts): what `paystream refusals list` shows."""
    cur.execute(
        "SELECT to_char(last_refused_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),"
        " provider, code, user_id, event_id, attempts::text FROM refused_deliveries"
        " WHERE (%(code)s::text IS NULL OR code = %(code)s)"
        " AND (%(user)s::text IS NULL OR user_id = %(user)s)"
        " ORDER BY last_refused_at DESC LIMIT %(limit)s",
        {"code": code, "user": user_id, "limit": limit})
    return [tuple(row) for row in cur.fetchall()]


def purge_older(cur: Cursor, cutoff: datetime, limit: int) -> int:
    """Delete up to `limit` refusals last retried before `cutoff`, oldest first, in one
    statement (housekeeping's batch; its index is refused_deliveries_last_idx). A row
    is only a record: one retried while its batch runs may go with it, and the
    provider's next retry records it anew (no lock beyond the batch's own rows, so the
    operator needs no UPDATE grant)."""
    cur.execute("DELETE FROM refused_deliveries WHERE (provider, event_id, code) IN ("
                " SELECT provider, event_id, code FROM refused_deliveries"
                " WHERE last_refused_at < %s ORDER BY last_refused_at LIMIT %s)",
                (cutoff, limit))
    return max(int(cur.rowcount), 0)


def count_older(cur: Cursor, cutoff: datetime) -> int:
    """How many refusals purge_older would delete with this cutoff (no limit)."""
    cur.execute("SELECT count(*) FROM refused_deliveries WHERE last_refused_at < %s",
                (cutoff,))
    row = cur.fetchone()
    return 0 if row is None else int(row[0])
