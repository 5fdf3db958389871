"""The notifier (group `notifier`): paystream.notifications as intents and delivery slots.

It records and never sends (notify/delivery.py sends; docs/notifications.md has the
whole design). In the batch transaction the commit protocol opened, `apply`:
  1. reads each record as an intent (schema.notifications.parse_intent); one that is not
     an intent, or whose key is not its user, is a dead letter;
  2. records the intents, INSERT ... ON CONFLICT (intent_id) DO NOTHING: a redelivered
     batch records nothing new;
  3. inserts one delivery slot per (intent, enabled endpoint that wants it), ON CONFLICT
     DO NOTHING on the slot's primary key (intent_id, endpoint_id).
Steps 2 and 3 are schema/notification_slots.py's (the reminders record through it too).
The batch commits, then its offsets (consumers/commit.py): a slot is durable before the
record that caused it is acknowledged, and before anything is sent.

An endpoint gets the intents the notifier reads after the endpoint was added, while it is
enabled; earlier ones are not replayed to it (`paystream notifications redeliver` is the
operator's way).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson

from paystream.consumers.dlq import DeadLetter
from paystream.consumers.handler import BatchResult
from paystream.consumers.records import Record
from paystream.schema import notification_slots
from paystream.schema.db import Connection, Cursor, DbRole
from paystream.schema.notifications import Intent, IntentError, parse_intent


class NotifierHandler:
    name = "notifier"
    db_role: DbRole = "notifier"

    def after_batch(self, connection: Callable[[], Connection]) -> None:
        """Nothing between batches: the sender runs on its own."""

    def apply(self, cur: Cursor, records: Sequence[Record]) -> BatchResult:
        result = BatchResult()
        # Step 1. Each record as an intent; a repeat inside the batch once.
        intents: dict[str, tuple[Intent, str | None]] = {}
        for record in records:
            try:
                intent = _read(record)
            except IntentError as exc:
                result.dead_letters.append(DeadLetter(record, exc.reason, exc.detail))
                continue
            if intent.id in intents:
                result.outcomes["duplicate"] += 1
            intents[intent.id] = (intent, record.header("trace_id"))
        if not intents:
            return result
        # Steps 2 and 3. The intents, once; a slot per intent and endpoint that wants
        # it (a redelivered intent too: ON CONFLICT keeps the slots it has).
        recorded = notification_slots.record(cur, list(intents.values()))
        result.outcomes["recorded"] += recorded.fresh
        result.outcomes["duplicate"] += len(intents) - recorded.fresh
        return result


def _read(record: Record) -> Intent:
    if record.value is None:
        raise IntentError("malformed", "a record without a value")
    try:
        obj = orjson.loads(record.value)
    except orjson.JSONDecodeError as exc:
        raise IntentError("malformed", f"not JSON: {exc}") from None
    intent = parse_intent(obj)
    if record.key_text != intent.user_id:
        raise IntentError("wrong_key", f"key {record.key_text!r} is not the intent's user"
                                       f" {intent.user_id!r}")
    return intent
