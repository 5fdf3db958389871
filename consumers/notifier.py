"""The notifier (group `notifier`): paystream.notifications records as intents and delivery slots.

It records and never sends (notify/delivery.py sends; docs/notifications.md has the
whole design). In the batch transaction the commit protocol opened, `apply`:
  1. reads each record's intents (notify.intents.parse_batch: a record carries
     a ledger batch's intents); a record whose seal does not verify (notify/seal.py)
     is a dead letter and none of its intents is recorded; a sealed record with an
     element that is not an intent is a dead letter, and its good intents are recorded
     all the same;
  2. records the intents, INSERT ... ON CONFLICT (intent_id) DO NOTHING: a redelivered
     batch records nothing new;
  3. inserts one delivery slot per (intent, enabled endpoint that wants it), ON CONFLICT
     DO NOTHING on the slot's primary key (intent_id, endpoint_id).
Steps 2 and 3 are notify/slots.py's (the reminders record through it too).
The batch commits, then its offsets (consumers/commit.py): a slot is durable before the
record that caused it is acknowledged, and before anything is sent.

An endpoint gets the intents the notifier reads after the endpoint was added, while it is
enabled; earlier ones are not replayed to it (`paystream notifications redeliver` is the
operator's way).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson

from paystream.consumers.dead_letters.send import DeadLetter
from paystream.consumers.handler import BatchResult
from paystream.consumers.records import Record
from paystream.notify import slots
from paystream.notify.intents import Intent, IntentError, parse_batch
from paystream.notify.seal import Sealer
from paystream.schema.db import Connection, Cursor, DbRole


class NotifierHandler:
    name = "notifier"
    db_role: DbRole = "notifier"

    def __init__(self, sealer: Sealer) -> None:
        self.sealer = sealer  # what a record's intents must be sealed with (notify/seal.py)

    def after_batch(self, connection: Callable[[], Connection]) -> None:
        """Nothing between batches: the sender runs on its own."""

    def apply(self, cur: Cursor, records: Sequence[Record]) -> BatchResult:
        result = BatchResult()
        # Step 1. Each record's intents; a repeat inside the batch once.
        intents: dict[str, tuple[Intent, str | None]] = {}
        for record in records:
            found, errors = _read(record, self.sealer)
            if errors:
                # The good intents of the record are still recorded: a dead letter must
                # not silence the others (a replay of it records nothing twice).
                first = errors[0]
                result.dead_letters.append(DeadLetter(
                    record, first.reason, f"{len(errors)} of {len(errors) + len(found)}"
                                          f" intents refused; first: {first.detail}"))
            for intent, trace_id in found:
                if intent.id in intents:
                    result.outcomes["duplicate"] += 1
                intents[intent.id] = (intent, trace_id)
        if not intents:
            return result
        # Steps 2 and 3. The intents, once; a slot per intent and endpoint that wants
        # it (a redelivered intent too: ON CONFLICT keeps the slots it has).
        recorded = slots.record(cur, list(intents.values()))
        result.outcomes["recorded"] += recorded.fresh
        result.outcomes["duplicate"] += len(intents) - recorded.fresh
        return result


def _read(record: Record, sealer: Sealer
          ) -> tuple[list[tuple[Intent, str | None]], list[IntentError]]:
    if record.value is None:
        return [], [IntentError("malformed", "a record without a value")]
    try:
        obj = orjson.loads(record.value)
    except orjson.JSONDecodeError as exc:
        return [], [IntentError("malformed", f"not JSON: {exc}")]
    return parse_batch(obj, sealer)
