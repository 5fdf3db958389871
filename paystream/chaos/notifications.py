"""What the chaos run's notifications must be, from evidence the notifier does not keep.

Three independent records are compared; the notifier's own tables are not one of them:
  1. what the run's users must be told, recomputed from the sender's record (each
     accepted event's outcome, replayed in invariants.expected_books; each invoice's
     accepted payments, chaos/invoices.py) and from the chain's receipts, by the rules
     of docs/notifications.md written out again here;
  2. what the ledger published: the intents of the run's users on
     paystream.notifications (records of a batch's intents), read from the offsets the
     run started at (a reader of its own, no group);
  3. what arrived: the receiver (receiver.py) verified every signature with the Standard
     Webhooks reference library and kept each request's webhook-id, body and answer.
Must hold: 1 and 2 are the same set of (source event, type) pairs, each under one
intent id; every published intent was answered 2xx at least once, at its user's
endpoint, under its own id as webhook-id, with one body whatever the attempt; nothing
arrived that was not published; no request failed its signature. A same-id request after
a 2xx (a crash between send and record) is a duplicate the receiver drops: counted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from paystream import kafka_security
from paystream.chaos.chain import ChainDeposit, landed
from paystream.chaos.invoices import ChaosInvoice, expected_intents
from paystream.chaos.receiver import Receiver
from paystream.chaos.traffic import MONEY, Request

Pair = tuple[str, str]  # (source event id, intent type)

# The outcomes that refuse an event (no money moved), written again from docs/ledger.md.
_REFUSED = frozenset({"insufficient_funds", "account_flagged", "hold_not_open",
                      "exceeds_hold", "invalid_reversal", "exceeds_original"})
# What an applied event of each type tells its user (docs/notifications.md).
_APPLIED = {"deposit": "deposit.credited", "withdrawal": "withdrawal.applied",
            "withdrawal_fee": "withdrawal.applied",
            "withdrawal_requested": "withdrawal.requested",
            "withdrawal_settled": "withdrawal.settled",
            "withdrawal_failed": "withdrawal.failed", "refund": "balance.reversed"}


def expected_pairs(accepted: Iterable[Request], outcomes: dict[str, str],
                   deposits: Iterable[ChainDeposit],
                   receipt: Callable[[str], dict[str, Any] | None],
                   invoices: Iterable[ChaosInvoice] = ()) -> set[Pair]:
    """Every (source event, intent type) the run's users must be told of: per accepted
    money event by its replayed outcome, per chain deposit recorded by what the chain
    holds now (pending when recorded, then finalized if its transfer landed, else
    reorged), per invoice by its accepted payments (chaos/invoices.py)."""
    accepted = list(accepted)
    pairs: set[Pair] = expected_intents(invoices, accepted)
    for req in accepted:
        if req.kind not in MONEY:
            continue
        outcome = outcomes[req.event_id]
        if outcome in _REFUSED:
            family = "balance" if req.event_type == "refund" else "withdrawal"
            pairs.add((req.event_id, f"{family}.rejected"))
            continue
        pairs.add((req.event_id, _APPLIED[req.event_type]))
        if outcome == "shortfall":  # a refund the balance could not cover
            pairs.add((req.event_id, "shortfall.opened"))
    for d in deposits:
        on_chain = landed(receipt(d.tx_hash))
        # Recorded if the ingest accepted its webhook, or (any webhook or none) by the
        # scanner, which reads every final block.
        if not (d.event_id and (d.accepted or on_chain)):
            continue
        pairs.add((d.event_id, "deposit.pending"))
        pairs.add((f"{d.event_id}:finalized", "deposit.finalized") if on_chain
                  else (f"{d.event_id}:reorged", "deposit.reorged"))
    return pairs


@dataclass
class Published:
    """The intents the ledger published for the run's users."""

    users: set[str]
    ids: dict[Pair, set[str]] = field(default_factory=dict)  # several: a violation
    user_of: dict[str, str] = field(default_factory=dict)  # intent id -> record key

    def add(self, key: bytes | None, value: bytes | None) -> None:
        """One record of the topic: a batch of intents (docs/notifications.md), each
        kept if its user is one of the run's (another user's is not the run's)."""
        del key  # a record's key is its source partition: its intents name their users
        record = json.loads(value or b"{}")
        for body in record.get("intents", []):
            user = str(body["data"]["user_id"])
            if user not in self.users:
                continue
            pair = (str(body["data"]["event_id"]), str(body["type"]))
            self.ids.setdefault(pair, set()).add(str(body["id"]))
            self.user_of[str(body["id"])] = user


class TopicReader:
    """Reads the notifications topic into a Published from the offsets the run started
    at: a consumer assigned to the partitions (no group, nothing committed)."""

    def __init__(self, bootstrap: str, topic: str, starts: dict[int, int],
                 into: Published) -> None:
        self.topic = topic
        self.into = into
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                                   "enable.auto.commit": False, "log_level": 2,
                                   **kafka_security.client_config(kafka_security.ADMIN)})
        self._consumer.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
        self._next = dict(starts)

    def catch_up(self, timeout_s: float = 30.0) -> bool:
        """Read up to the partitions' current ends; False if that took too long."""
        ends = {p: self._consumer.get_watermark_offsets(TopicPartition(self.topic, p),
                                                        timeout=10)[1] for p in self._next}
        deadline = time.monotonic() + timeout_s
        while any(self._next[p] < ends[p] for p in ends):
            if time.monotonic() > deadline:
                return False
            msg = self._consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            partition, offset = msg.partition(), msg.offset()
            if partition is None or offset is None:
                continue
            self._next[partition] = offset + 1
            self.into.add(msg.key(), msg.value())
        return True

    def close(self) -> None:
        self._consumer.close()


@dataclass
class Deliveries:
    """What the receiver saw for the run's intents, counted for the report."""

    published: int = 0        # distinct intents on the topic for the run's users
    expected: int = 0         # pairs recomputed from the sender's record and the chain
    delivered: int = 0        # published intents answered 2xx at least once
    requests: int = 0         # verified requests in all
    planned_failures: int = 0  # requests the receiver answered 500 on purpose
    resent_after_2xx: int = 0  # same-id requests after the id's first 2xx
    bad_signatures: int = 0
    lost: list[str] = field(default_factory=list)
    twice: list[str] = field(default_factory=list)  # one change under two webhook-ids
    violations: list[str] = field(default_factory=list)


def undelivered(published: Published, receiver: Receiver,
                path_of: Callable[[str], str]) -> int:
    """Published intents not yet answered 2xx at their user's endpoint."""
    ok: dict[str, set[str]] = {}
    left = 0
    for intent_id, user in published.user_of.items():
        path = path_of(user)
        if path not in ok:
            ok[path] = {k for k, s in receiver.statuses(path).items()
                        if any(200 <= c < 300 for c in s)}
        left += intent_id not in ok[path]
    return left


def check_deliveries(expected: set[Pair], published: Published, receiver: Receiver,
                     path_of: Callable[[str], str]) -> Deliveries:
    out = Deliveries(published=len(published.user_of), expected=len(expected))
    topic = set(published.ids)
    for pair in sorted(expected - topic):
        out.lost.append(f"notification {pair[1]} of {pair[0]}: never published")
    for pair in sorted(topic - expected):
        out.violations.append(f"notification {pair[1]} of {pair[0]} published, the sender's"
                              " record does not explain it")
    for pair, ids in sorted(published.ids.items()):
        if len(ids) > 1:
            out.twice.append(f"{pair[1]} of {pair[0]} published under {sorted(ids)}")
    owner = {i: pair for pair, ids in published.ids.items() for i in ids}
    seen: dict[Pair, set[str]] = {}
    for user in sorted(published.users):
        path = path_of(user)
        statuses = receiver.statuses(path)
        bodies: dict[str, set[str]] = {}
        for webhook_id, body in zip(receiver.ids(path), receiver.bodies(path), strict=True):
            bodies.setdefault(webhook_id, set()).add(json.dumps(body, sort_keys=True))
            pair = (str(body.get("data", {}).get("event_id")), str(body.get("type")))
            seen.setdefault(pair, set()).add(webhook_id)
            if body.get("id") != webhook_id:
                out.violations.append(f"{path}: webhook-id {webhook_id}, body id {body.get('id')}")
            if body.get("data", {}).get("user_id") != user:
                out.violations.append(f"{path}: {webhook_id} is another user's notification")
            if webhook_id not in owner:
                out.violations.append(f"{path}: {webhook_id} was never published")
        for webhook_id, answers in statuses.items():
            out.requests += len(answers)
            out.planned_failures += answers.count(500)
            first_ok = next((n for n, c in enumerate(answers) if 200 <= c < 300), None)
            if first_ok is not None:
                out.resent_after_2xx += len(answers) - first_ok - 1
            if len(bodies.get(webhook_id, ())) > 1:
                out.violations.append(f"{path}: {webhook_id} sent with different bodies")
    for pair, ids in sorted(seen.items()):
        if len(ids) > 1:
            out.twice.append(f"{pair[1]} of {pair[0]} delivered under {sorted(ids)}")
    left = undelivered(published, receiver, path_of)
    out.delivered = out.published - left
    if left:
        missing = [i for i, u in published.user_of.items()
                   if not any(200 <= c < 300 for c in receiver.statuses(path_of(u)).get(i, []))]
        out.lost += [f"notification {i} ({owner[i][1]} of {owner[i][0]}): never answered 2xx"
                     for i in sorted(missing)]
    refused = receiver.refused()
    out.bad_signatures = len(refused)
    out.violations += [f"request to {path} refused: {why}" for path, why in refused[:20]]
    return out


def report_line(d: Deliveries) -> str:
    """The report's line."""
    return (f"notifications: {d.published} intents published for the run's users "
            f"({d.expected} expected from the sender's record and the chain), {d.delivered}"
            f" delivered; {d.requests} signed requests verified, {d.bad_signatures} refused;"
            f" {d.planned_failures} answered 500 on purpose and retried; same-id duplicates"
            f" (sent again after a 2xx): {d.resent_after_2xx}; under two webhook-ids:"
            f" {len(d.twice)}")

