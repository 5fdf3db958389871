"""Notification intents (notify/intents.py), the sender's rules (notify/schedule.py,
notify/settings.py) and Standard Webhooks signing checked against the reference
implementation (the `standardwebhooks` package), both ways."""

from __future__ import annotations

import hashlib
import json
import random
import time
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook, WebhookVerificationError

from paystream import standard_webhooks
from paystream.env import SettingsError
from paystream.notify.endpoints import EndpointRefused, check_url
from paystream.notify.intents import (
    BATCH_LIMIT,
    INTENT_ID_PATTERN,
    IntentError,
    IntentType,
    check_pattern,
    intent_id,
    new_intent,
    now_text,
    of_outcome,
    outbox_batches,
    parse_batch,
    parse_intent,
    wants,
)
from paystream.notify.schedule import Verdict, judge, retry_delay
from paystream.notify.seal import Sealer
from paystream.notify.settings import DEFAULT_RETRY_DELAYS_S, NotifySettings, ReminderSettings
from paystream.schema.events import EventType, PaymentEvent, SettlementType
from paystream.schema.processed_events import REJECTIONS, Outcome

SEALER = Sealer((b"the test's seal key",))


def _event(kind: EventType | SettlementType, *, chain: dict | None = None,
           reference: str | None = None) -> PaymentEvent:
    return PaymentEvent("evt-1", kind, "u-1", "USDC", Decimal("12.50"), "test", chain=chain,
                        reference=reference)


def test_an_intent_id_is_derived_from_its_source_and_type_only() -> None:
    first = intent_id("evt-1", IntentType.DEPOSIT_CREDITED)
    assert INTENT_ID_PATTERN.fullmatch(first)
    # Independently: the first 32 hex digits of SHA-256 over the length-prefixed fields.
    digest = hashlib.sha256()
    for part in (b"evt-1", b"deposit.credited"):
        digest.update(len(part).to_bytes(8, "big") + part)
    assert first == "ntf_" + digest.hexdigest()[:32]
    assert intent_id("evt-1", IntentType.DEPOSIT_FINALIZED) != first
    assert intent_id("evt-2", IntentType.DEPOSIT_CREDITED) != first


@pytest.mark.parametrize(("kind", "outcome", "chain", "expected"), [
    (EventType.DEPOSIT, Outcome.APPLIED, None, IntentType.DEPOSIT_CREDITED),
    (EventType.DEPOSIT, Outcome.PENDING_FINALITY, {"network": "x"}, IntentType.DEPOSIT_PENDING),
    (EventType.WITHDRAWAL, Outcome.APPLIED, None, IntentType.WITHDRAWAL_APPLIED),
    (EventType.WITHDRAWAL, Outcome.INSUFFICIENT_FUNDS, None, IntentType.WITHDRAWAL_REJECTED),
    (EventType.WITHDRAWAL_REQUESTED, Outcome.ACCOUNT_FLAGGED, None,
     IntentType.WITHDRAWAL_REJECTED),
    (EventType.WITHDRAWAL_REQUESTED, Outcome.APPLIED, None, IntentType.WITHDRAWAL_REQUESTED),
    (EventType.WITHDRAWAL_SETTLED, Outcome.APPLIED, None, IntentType.WITHDRAWAL_SETTLED),
    (EventType.WITHDRAWAL_FAILED, Outcome.APPLIED, None, IntentType.WITHDRAWAL_FAILED),
    (EventType.HOLD_EXPIRED, Outcome.APPLIED, None, IntentType.WITHDRAWAL_FAILED),
    (EventType.REFUND, Outcome.SHORTFALL, None, IntentType.BALANCE_REVERSED),
    (EventType.REFUND, Outcome.EXCEEDS_ORIGINAL, None, IntentType.BALANCE_REJECTED),
    (SettlementType.DEPOSIT_FINALIZED, Outcome.APPLIED, {"deposit_event_id": "d-1"},
     IntentType.DEPOSIT_FINALIZED),
    (SettlementType.DEPOSIT_REORGED, Outcome.REORGED, {"deposit_event_id": "d-1"},
     IntentType.DEPOSIT_REORGED),
    (SettlementType.DEPOSIT_CREDITED, Outcome.CREDITED, {"deposit_event_id": "d-1"},
     IntentType.DEPOSIT_CREDITED),
    (SettlementType.DEPOSIT_REVERSED, Outcome.SHORTFALL, {"deposit_event_id": "d-1"},
     IntentType.DEPOSIT_REVERSED),
])
def test_each_user_visible_outcome_has_its_intent(kind, outcome, chain, expected) -> None:
    intent = of_outcome(_event(kind, chain=chain), outcome, now_text())
    assert intent is not None and intent.type is expected
    assert intent.id == intent_id("evt-1", expected)
    data = intent.data
    assert (data["event_id"], data["user_id"], data["asset"], data["amount"]) == (
        "evt-1", "u-1", "USDC", "12.5")
    assert data["event_type"] == kind.value
    if outcome in REJECTIONS:
        assert data["reason"] == outcome.value
    if chain and "deposit_event_id" in chain:
        assert data["deposit_event_id"] == "d-1"


def test_every_rejection_is_told_and_a_waiting_credit_is_not_told_twice() -> None:
    for outcome in REJECTIONS - {Outcome.UNKNOWN_USER}:
        assert of_outcome(_event(EventType.WITHDRAWAL_FEE), outcome, now_text()) is not None
    # An unknown user has nobody to tell (and no endpoint of theirs).
    assert of_outcome(_event(EventType.DEPOSIT), Outcome.UNKNOWN_USER, now_text()) is None
    # A deposit_credited's outcome settles to applied later (processed_events.settle),
    # never through the planner again; a plain deposit has no `credited` outcome.
    assert of_outcome(_event(EventType.DEPOSIT), Outcome.CREDITED, now_text()) is None


def test_an_intent_reads_back_and_a_tampered_one_does_not() -> None:
    intent = new_intent(IntentType.SHORTFALL_OPENED, "evt-9", "u-1", event_type="refund",
                        asset="USD", amount=Decimal("90"), created_at=now_text())
    wire = json.loads(json.dumps(intent.body()))
    assert parse_intent(wire) == intent
    for broken, reason in (({**wire, "id": intent_id("evt-8", intent.type)}, "wrong_intent_id"),
                           ({**wire, "type": "deposit.stolen"}, "unknown_intent_type"),
                           ({**wire, "data": {**wire["data"], "amount": 90.0}},
                            "invalid_amount"),
                           ({**wire, "data": "x"}, "malformed"),
                           ({**wire, "created_at": "yesterday"}, "malformed")):
        with pytest.raises(IntentError) as info:
            parse_intent(broken)
        assert info.value.reason == reason


def _many(n: int) -> list:
    return [(new_intent(IntentType.DEPOSIT_CREDITED, f"evt-{k}", "u-1", event_type="deposit",
                        asset="USD", amount=Decimal(k + 1), created_at=now_text()), f"tr-{k}")
            for k in range(n)]


def test_a_ledger_batch_travels_in_records_of_at_most_the_limit_and_reads_back() -> None:
    pairs = _many(BATCH_LIMIT + 3)
    rows = outbox_batches(pairs, "paystream.payments-7", SEALER)
    assert [len(r["payload"]["intents"]) for r in rows] == [BATCH_LIMIT, 3]
    assert {r["aggregateid"] for r in rows} == {"paystream.payments-7"}
    assert [(r["event_id"], r["trace_id"]) for r in rows] == [
        (pairs[0][0].id, "tr-0"), (pairs[BATCH_LIMIT][0].id, f"tr-{BATCH_LIMIT}")]
    back = [p for r in rows
            for p in parse_batch(json.loads(json.dumps(r["payload"])), SEALER)[0]]
    assert back == pairs  # every intent, in order, with its own trace id
    # Each element is the webhook body plus the trace id, nothing else; a seal a record.
    element = rows[1]["payload"]["intents"][0]
    assert {k: v for k, v in element.items() if k != "trace_id"} == pairs[BATCH_LIMIT][0].body()
    assert all(set(r["payload"]) == {"intents", "seal"} for r in rows)


def _sealed(items: list) -> dict:
    return {"intents": items, "seal": SEALER.seal(items)}


def test_a_record_keeps_its_good_intents_and_names_the_bad_ones() -> None:
    (good, trace), (other, _) = _many(2)
    forged = {**other.body(), "id": "ntf_" + "0" * 32}
    found, errors = parse_batch(_sealed([{**good.body(), "trace_id": trace}, forged,
                                         {"type": "deposit.credited"}]), SEALER)
    assert found == [(good, trace)]
    assert [e.reason for e in errors] == ["wrong_intent_id", "malformed"]
    for not_a_batch in (good.body(), [good.body()], {"intents": []},
                        {"intents": [good.body()] * (BATCH_LIMIT + 1)}, None):
        found, errors = parse_batch(not_a_batch, SEALER)
        assert found == [] and [e.reason for e in errors] == ["malformed"]


def test_only_a_record_sealed_with_our_key_over_what_it_carries_is_read() -> None:
    (good, trace), (other, _) = _many(2)
    record = json.loads(json.dumps(outbox_batches([(good, trace), (other, trace)], "k",
                                                  SEALER)[0]["payload"]))
    # As the outbox's jsonb gives it back: keys in another order at every depth.
    shuffled = {"seal": record["seal"], "intents": [
        {k: ({dk: i["data"][dk] for dk in reversed(i["data"])} if k == "data" else i[k])
         for k in reversed(i)} for i in record["intents"]]}
    assert [i for i, _ in parse_batch(shuffled, SEALER)[0]] == [good, other]
    # Rotation: a new key first, the old one still verifies what it sealed.
    assert len(parse_batch(record, Sealer((b"new", *SEALER.keys)))[0]) == 2

    def reasons(obj: object, sealer: Sealer = SEALER) -> list[str]:
        found, errors = parse_batch(obj, sealer)
        assert found == []
        return [e.reason for e in errors]

    assert reasons({"intents": record["intents"]}) == ["unsealed"]
    assert reasons(record, Sealer((b"another key",))) == ["bad_seal"]
    for path, value in ((("data", "amount"), "1000000"), (("data", "user_id"), "someone"),
                        (("created_at",), "2020-01-01T00:00:00.000Z"), (("data", "x"), 1)):
        altered = json.loads(json.dumps(record))
        target = altered["intents"][1]
        for name in path[:-1]:
            target = target[name]
        target[path[-1]] = value
        assert reasons(altered) == ["bad_seal"], path
    dropped = {**record, "intents": record["intents"][:1]}  # one intent left out
    assert reasons(dropped) == ["bad_seal"]
    assert reasons({**record, "seal": 7}) == ["bad_seal"]
    assert reasons({**record, "intents": [*record["intents"][:1], "x"]}) == ["bad_seal"]


def test_the_seal_key_file_gives_one_key_a_line_and_refuses_an_empty_one(tmp_path) -> None:
    path = tmp_path / "intent-seal"
    path.write_text("first\nsecond\n")
    assert Sealer.from_file(path).keys == (b"first", b"second")
    path.write_text("\n")
    with pytest.raises(SettingsError, match="empty"):
        Sealer.from_file(path)
    with pytest.raises(SettingsError, match="does not exist"):
        Sealer.from_file(tmp_path / "absent")
    with pytest.raises(ValueError):
        Sealer(())


def test_event_filters() -> None:
    assert wants([], "deposit.credited") and wants(["*"], "shortfall.opened")
    assert wants(["deposit.*"], "deposit.credited")
    assert not wants(["deposit.*"], "withdrawal.rejected")
    assert not wants(["deposit.credited"], "deposit.creditedx")
    assert check_pattern("withdrawal.*") == "withdrawal.*"
    for bad in ("deposit", "deposits.*", "deposit.credited.*", ""):
        with pytest.raises(ValueError, match="unknown event filter"):
            check_pattern(bad)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9000/hook", "https://hooks.example.com/a?b=c", "http://[::1]:80/x"])
def test_an_endpoint_url_is_kept_as_typed(url) -> None:
    assert check_url(url) == url


@pytest.mark.parametrize(("url", "why"), [
    ("ftp://example.com/", "http:// or https://"), ("http:///path", "with a host"),
    ("http://[::1", "is not a URL"), ("http://example.com:99999/", "is not a URL"),
    ("https://user:secret@example.com/", "credentials"), ("http://a b/", "no spaces"),
    ("http://example.com/\x00", "printable"), ("http://e.com/" + "a" * 2000, "at most")])
def test_an_endpoint_url_that_is_not_one_is_refused_with_its_reason(url, why) -> None:
    with pytest.raises(EndpointRefused, match=why):
        check_url(url)


@pytest.mark.parametrize(("status", "verdict"), [
    (200, Verdict.DELIVERED), (204, Verdict.DELIVERED), (None, Verdict.RETRY),
    (500, Verdict.RETRY), (503, Verdict.RETRY), (408, Verdict.RETRY), (429, Verdict.RETRY),
    (301, Verdict.RETRY), (400, Verdict.REFUSED), (401, Verdict.REFUSED),
    (404, Verdict.REFUSED), (410, Verdict.REFUSED)])
def test_what_an_answer_means(status, verdict) -> None:
    assert judge(status) is verdict


@given(st.integers(min_value=1, max_value=len(DEFAULT_RETRY_DELAYS_S)),
       st.floats(min_value=0, max_value=0.99))
def test_retry_delays_follow_the_schedule_within_the_jitter(attempt, jitter) -> None:
    delay = retry_delay(attempt, DEFAULT_RETRY_DELAYS_S, jitter, random.Random(attempt))
    base = DEFAULT_RETRY_DELAYS_S[attempt - 1]
    assert delay is not None and base * (1 - jitter) - 1e-9 <= delay <= base * (1 + jitter) + 1e-9


def test_the_schedule_is_svix_like_and_ends() -> None:
    assert DEFAULT_RETRY_DELAYS_S[:6] == (5, 300, 1800, 7200, 18000, 36000)
    assert retry_delay(len(DEFAULT_RETRY_DELAYS_S) + 1, DEFAULT_RETRY_DELAYS_S, 0) is None
    assert retry_delay(2, DEFAULT_RETRY_DELAYS_S, 0) == 300


def test_settings_refuse_a_lease_a_live_sender_could_outlive() -> None:
    assert NotifySettings.from_env({}).lease_s >= 2 * NotifySettings.from_env({}).timeout_s
    with pytest.raises(SettingsError, match="LEASE_S"):
        NotifySettings.from_env({"PAYSTREAM_NOTIFY_TIMEOUT_S": "40"})
    with pytest.raises(SettingsError, match="RETRY_DELAYS_S"):
        NotifySettings.from_env({"PAYSTREAM_NOTIFY_RETRY_DELAYS_S": "5,soon"})
    fast = NotifySettings.from_env({"PAYSTREAM_NOTIFY_RETRY_DELAYS_S": "0.1, 0.2"})
    assert fast.retry_delays_s == (0.1, 0.2)


def test_our_signature_verifies_with_the_reference_implementation() -> None:
    key, old = b"k" * 32, b"o" * 32
    body = b'{"type":"deposit.credited","id":"ntf_1","created_at":"x","data":{}}'
    headers = standard_webhooks.headers("ntf_1", int(time.time()), body, [key, old])
    # Both keys of a rotation sign: a receiver holding either accepts it.
    for secret in (key, old):
        encoded = standard_webhooks.encode_secret(secret)
        assert standard_webhooks.decode_secret(encoded) == secret
        Webhook(encoded).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(standard_webhooks.encode_secret(b"x" * 32)).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(standard_webhooks.encode_secret(key)).verify(body + b" ", headers)


def test_the_reference_implementations_signature_verifies_with_ours() -> None:
    key = b"r" * 32
    now = int(time.time())
    signature = Webhook(standard_webhooks.encode_secret(key)).sign(
        "msg_1", datetime.fromtimestamp(now, UTC), '{"a":1}')
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(now),
               "webhook-signature": signature}
    assert standard_webhooks.verify(b'{"a":1}', headers, [key], tolerance_s=300) == "msg_1"


def test_a_reminder_window_must_be_wider_than_the_period() -> None:
    settings = ReminderSettings.from_env({"PAYSTREAM_REMIND_PERIOD_S": "10"})
    assert settings.window_s == 30 > settings.period_s
    with pytest.raises(SettingsError, match="wider than"):
        ReminderSettings.from_env({"PAYSTREAM_REMIND_PERIOD_S": "60",
                                   "PAYSTREAM_REMIND_WINDOW_S": "60"})
    assert ReminderSettings.from_env({}).shortfall_after_s == (3600, 86_400, 259_200)
