"""No content can stop the money (docs/guarantees.md#poison-message), on the real stack.

One correctly signed delivery whose numbers Debezium could not type (the connector
expanded each payload into an inferred Connect schema) failed the connector task for
good, and then nothing reached Kafka for any user. Here hostile-but-valid deliveries go
through a real ingest server to both endpoints, and arbitrary JSON straight into the
outbox; the connector task must stay RUNNING throughout, every accepted event must be
taken up by a real ledger consumer, and an ordinary deposit sent afterwards must be in
the balance within 10 s.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import httpx
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from paystream import kafka_security
from paystream.connectors.endpoint import rest_client
from paystream.connectors.status import read_status
from paystream.ingest.request_body import MAX_NESTING
from paystream.schema.events import PAYMENTS_TOPIC
from paystream.schema.outbox import emit
from paystream.stack.kafka import start_group_at_end
from paystream.stack.settings import StackSettings
from tests.support.consumers import admin, create_topic, create_users
from tests.support.ids import unique
from tests.support.ingest import (
    alchemy_body,
    alchemy_headers,
    erc20_activity,
    eth_activity,
    ingest_server,
    payment_body,
    payment_headers,
    random_address,
    random_hash,
)
from tests.support.topics import headers_of
from tests.support.waiting import wait_for

BODY_LIMIT = 1024 * 1024  # PAYSTREAM_INGEST_MAX_BODY_BYTES's default, the server's here
APPLIED_WITHIN_S = 10.0
BEYOND_FLOAT = "beyond-float-placeholder"  # written as the JSON number 1e400


class TaskWatch:
    """Samples the outbox connector's status every 100 ms in a thread: any sample that
    is not RUNNING (connector and every task) is kept."""

    def __init__(self) -> None:
        self.samples = 0
        self.bad: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        endpoint = StackSettings.from_env()
        with rest_client(timeout=5) as client:
            while not self._stop.is_set():
                try:
                    status = read_status(endpoint, client=client)
                except httpx.HTTPError as exc:
                    self.bad.append(f"Connect did not answer: {exc}")
                else:
                    self.samples += 1
                    if not status.running:
                        self.bad.append(f"{status.summary} {status.failure_causes}")
                self._stop.wait(0.1)

    def __enter__(self) -> TaskWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def assert_always_running(self) -> None:
        assert self.samples >= 5, f"only {self.samples} status samples"
        assert not self.bad, f"the connector task was not RUNNING: {self.bad[:3]}"


@contextmanager
def _probe_topic() -> Iterator[str]:
    """An aggregate type of this test's own, routed by the Event Router to its own topic
    (created first, as the stack creates the payment topics), deleted afterwards."""
    aggregate = unique("cdc-probe")
    topic = f"paystream.{aggregate}"
    create_topic(topic, partitions=1)
    # Connect may write only the topics the stack grants it (stack/kafka.py ACLS): a new
    # aggregate type needs its topic and a Write ACL, like this one.
    client = admin()
    grant = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                       f"User:{kafka_security.username(kafka_security.CONNECT)}", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW)
    client.create_acls([grant])[grant].result(timeout=30)
    grant_filter = AclBindingFilter(grant.restype, grant.name, grant.resource_pattern_type,
                                    grant.principal, grant.host, grant.operation,
                                    grant.permission_type)
    try:
        yield aggregate
    finally:
        client.delete_acls([grant_filter])[grant_filter].result(timeout=30)
        client.delete_topics([topic], operation_timeout=30)[topic].result(timeout=30)


def _nested(depth: int) -> Any:
    """`depth` levels of containers, alternating arrays and objects, innermost empty."""
    value: Any = []
    for level in range(depth - 1):
        value = {"k": value} if level % 2 == 0 else [value]
    return value


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


# Payloads no paystream code writes today but that are valid JSON: the connector must
# carry each one as it is (the ledger is where a record is judged, not Connect).
OUTBOX_PAYLOADS: list[Any] = [
    {"block_number": 2**64 + 5, "log_index": -(2**70)},   # the failure
    {"n": 10**60, "small": 1e-300, "large": 1.7976931348623157e308, "negative": -0.0},
    {"mixed": [1, "one", 1.5, None, True, {"a": []}, []]},  # one array, many types
    {"field": 1}, {"field": "1"}, {"field": [1]}, {"field": {"v": 1}}, {"field": None},
    {"empty_array": [], "empty_object": {}, "null": None},
    {"deep": _nested(200)},
    {"text": "💸 ünïcødé \u2028 \\ \" " * 5_000, "🔑": "ключ"},
    [1, 2, 3], "just a string", 12, None,
]


def test_any_json_payload_in_the_outbox_arrives_as_written(db, topic_reader) -> None:
    with _probe_topic() as aggregate, TaskWatch() as watch:
        reader = topic_reader(f"paystream.{aggregate}")
        key = unique("probe-key")
        ids = [f"{key}-{i}" for i in range(len(OUTBOX_PAYLOADS))]
        with db.cursor() as cur:
            cur.execute("BEGIN")
            for event_id, payload in zip(ids, OUTBOX_PAYLOADS, strict=True):
                emit(cur, aggregatetype=aggregate, aggregateid=key, event_type="probe",
                     event_id=event_id, payload=payload, trace_id=f"trace-{event_id}")
            cur.execute("COMMIT")
        messages = reader.read(len(ids), timeout=60)
        time.sleep(0.5)  # one more status sample after the last record
    watch.assert_always_running()
    arrived = {headers_of(m)["event_id"]: m for m in messages}
    assert sorted(arrived) == sorted(ids), f"{len(arrived)} of {len(ids)} arrived"
    for event_id, payload in zip(ids, OUTBOX_PAYLOADS, strict=True):
        msg = arrived[event_id]
        assert msg.key().decode() == key
        assert headers_of(msg)["event_type"] == "probe"
        assert headers_of(msg)["trace_id"] == f"trace-{event_id}"
        # The value is the JSON text itself (not a JSON string holding it), every number
        # exact: compared as Decimals, not floats.
        sent = json.loads(json.dumps(payload), parse_float=Decimal)
        assert json.loads(msg.value(), parse_float=Decimal) == sent, event_id
    deep = ids[next(i for i, p in enumerate(OUTBOX_PAYLOADS)
                    if isinstance(p, dict) and "deep" in p)]
    assert _depth(json.loads(arrived[deep].value())) == 201


def _alchemy_docs_erc721(to: str) -> dict[str, Any]:
    """Alchemy's documented ERC-721 activity: category token, a token id, rawValue "0x",
    no transaction hash and no blockNum on the activity."""
    return {"category": "token", "fromAddress": random_address(), "toAddress": to,
            "erc721TokenId": "0x1",
            "rawContract": {"rawValue": "0x", "address": random_address()},
            "log": {"removed": False, "data": "0x", "topics": [random_hash()]}}


def _utf8(body: bytes) -> bytes:
    """The same JSON with its text as raw UTF-8 rather than \\u escapes."""
    return json.dumps(json.loads(body), ensure_ascii=False).encode()


def _near_limit(make_body, limit: int) -> bytes:
    """The body `make_body(padding)` padded with two-byte characters to `limit` - 1 or
    `limit` bytes."""
    empty = len(_utf8(make_body("")))
    body = _utf8(make_body("é" * ((limit - empty) // 2)))
    assert limit - 1 <= len(body) <= limit, len(body)
    return body


def _hostile_deliveries(address: str, owner: str, rich: str,
                        stranger: str) -> list[tuple[str, bytes, int]]:
    """(endpoint, body, expected HTTP status) for each hostile-but-valid delivery."""
    at_limits = erc20_activity(address, 1_000_000, block=2**63 - 1, log_index=2**31 - 1)
    json_ints = erc20_activity(address, 2_000_000, decimals="0x6", log_index=3)
    json_ints["blockNum"] = 19_000_000  # the same field as a JSON integer, not hex
    json_ints["log"]["logIndex"] = 3
    decorated = eth_activity(address, 10**15)
    decorated.update({"asset": "💸" * 20_000, "extra": _nested(MAX_NESTING - 4),
                      "erc721TokenId": None, "log": {}, "notes": [], "more": {}})
    unknown = eth_activity(random_address(), 5)
    unknown.update({"value": 1e308, "typeTraceAddress": "ü" * 300, "blockNum": 2**80})
    beyond_float = eth_activity(stranger, 5)
    beyond_float["value"] = BEYOND_FLOAT  # a JSON number no float holds (1e400)
    hostile_numbers = [
        erc20_activity(address, 5, block=2**63),                  # BIGINT + 1
        dict(erc20_activity(address, 5), blockNum=2**64 + 5),     # a JSON integer
        erc20_activity(address, 5, log_index=2**31),              # INTEGER + 1
        erc20_activity(address, 5, log_index=2**64),
        erc20_activity(address, 2**256, decimals=70),             # beyond NUMERIC(78,0)
        erc20_activity(address, 2**256 - 1, decimals=0),          # beyond NUMERIC(38,18)
    ]
    deliveries: list[tuple[str, bytes, int]] = [
        ("alchemy", alchemy_body([at_limits]), 200),
        ("alchemy", alchemy_body([json_ints]), 200),
        ("alchemy", alchemy_body([decorated]), 200),
        ("alchemy", alchemy_body([_alchemy_docs_erc721(address)]), 200),
        ("alchemy", alchemy_body(hostile_numbers), 200),
        ("alchemy", alchemy_body([unknown, 17, None, [], {}, "0x"]), 200),
        ("alchemy", alchemy_body([beyond_float]), 200),
        ("alchemy", alchemy_body([]), 200),
    ]
    near = erc20_activity(address, 3_000_000, log_index=5)
    deliveries.append(("alchemy", _near_limit(
        lambda pad: alchemy_body([dict(near, pad=pad)]), BODY_LIMIT), 200))

    def pay(event_type: str = "deposit", amount: str = "1", user: str = owner,
            **extra: Any) -> bytes:
        return payment_body(unique("hostile-pay"), user, amount, event_type, **extra)

    deliveries += [
        ("payments", pay(amount="99999999999999999999.999999999999999999", user=rich), 200),
        ("payments", pay(amount="1E-18"), 200),
        ("payments", pay(amount="1e19", user=rich, event_type="withdrawal"), 200),
        ("payments", pay(meta=_nested(MAX_NESTING - 1), n=2**200, f=1e308,
                         u="💸" * 50_000, e=[], o={}), 200),
        ("payments", payment_body(unique('x"{}[]\\\'<>&%') + "~" * 150, owner, "1"), 200),
        ("payments", payment_body(f'"{unique("quoted")}"', owner, "1"), 200),
        ("payments", pay(asset=None), 200),
        ("payments", _near_limit(lambda pad: pay(pad=pad), BODY_LIMIT), 200),
        # Refused with a reason, nothing written:
        ("payments", pay(asset="ETH_MAINNET:native"), 400),
        ("payments", pay(asset=12), 400),
        ("payments", pay(amount=1e400), 400),  # type: ignore[arg-type]
        ("payments", pay(amount="1" * 21), 400),
        ("payments", _near_limit(lambda pad: pay(pad=pad), BODY_LIMIT + 2), 413),
    ]
    return [(endpoint, _utf8(body).replace(f'"{BEYOND_FLOAT}"'.encode(), b"1e400"), status)
            for endpoint, body, status in deliveries]


def _post(url: str, endpoint: str, body: bytes) -> httpx.Response:
    headers = alchemy_headers(body) if endpoint == "alchemy" else payment_headers(body)
    return httpx.post(f"{url}/webhooks/{endpoint}", content=body, headers=headers, timeout=30)


def _status_of(db, event_ids: list[str]) -> dict[str, str]:
    with db.cursor() as cur:
        cur.execute("SELECT event_id, status FROM event_status WHERE event_id = ANY(%s)",
                    (event_ids,))
        return dict(cur.fetchall())


def test_hostile_deliveries_then_an_ordinary_deposit_is_applied_within_10s(db, pool) -> None:
    owner, address = unique("hostile-owner"), random_address()
    rich = unique("hostile-rich").ljust(64, "_")  # a user id of the longest form
    with db.cursor() as cur:
        create_users(cur, [owner, rich])
        cur.execute("INSERT INTO deposit_addresses (network, address, user_id)"
                    " VALUES ('ETH_MAINNET', %s, %s)", (address, owner))
    group, dlq_topic = unique("hostile-ledger"), unique("hostile-dlq")
    create_topic(dlq_topic)
    start_group_at_end(group, PAYMENTS_TOPIC)
    ledger = pool.start("ledger", topic=PAYMENTS_TOPIC, group=group, dlq_topic=dlq_topic,
                        extra_args=["--batch-timeout", "0.05"])
    # The 10 s are the pipeline's, not a cold start's: wait until the ledger reads.
    wait_for("the ledger's partitions", lambda: ledger.events("partitions_assigned"), 60)

    stranger = random_address()
    deliveries = _hostile_deliveries(address, owner, rich, stranger)
    accepted: list[str] = []
    wrong: list[str] = []
    with TaskWatch() as watch, ingest_server({"PAYMENTS_ASSETS": "USD"}) as srv:
        for i, (endpoint, body, expected) in enumerate(deliveries):
            answer = _post(srv.url, endpoint, body)
            if answer.status_code != expected:
                wrong.append(f"#{i} {endpoint}: {answer.status_code} (expected {expected})"
                             f" {answer.text[:300]}")
            elif expected == 200:
                accepted += [e["event_id"] for e in answer.json()["events"]
                             if e["outcome"] == "accepted"]
        assert not wrong, "\n".join(wrong)

        # The ordinary deposit after all of that.
        body = payment_body(unique("ordinary"), owner, "12.34")
        answer = _post(srv.url, "payments", body)
        assert answer.status_code == 200, answer.text
        sent_at = time.monotonic()

        # 1E-18, five deposits of 1 (extras ignored, two ids of printable punctuation,
        # the default asset, near the body limit), then the ordinary 12.34, last in the
        # owner's partition.
        expected_balance = Decimal("17.340000000000000001")

        def balance() -> bool:
            with db.cursor() as cur:
                cur.execute("SELECT balance FROM balances WHERE user_id = %s AND asset = 'USD'",
                            (owner,))
                row = cur.fetchone()
            return row is not None and row[0] == expected_balance
        try:
            wait_for("the ordinary deposit in the balance", balance, APPLIED_WITHIN_S)
        except AssertionError:
            raise AssertionError(pool.logs()) from None
        took = time.monotonic() - sent_at
    watch.assert_always_running()
    assert took <= APPLIED_WITHIN_S
    print(f"ordinary deposit in the balance {took:.2f} s after its 200;"
          f" {watch.samples} connector status samples, all RUNNING")

    # Nothing accepted is left behind: the ledger took up every event (chain deposits
    # wait for finality, the rest are applied).
    assert len(accepted) == 4 + 8, accepted
    statuses = wait_for("every accepted event taken up by the ledger",
                        lambda: (s := _status_of(db, accepted)) and
                        all(v != "received" for v in s.values()) and s, 30)
    expected = {e: ("pending_finality" if e.startswith("ETH_MAINNET:") else "applied")
                for e in accepted}
    assert statuses == expected
    with db.cursor() as cur:
        cur.execute("SELECT block_number, log_index FROM chain_deposits WHERE event_id = %s",
                    (next(e for e in accepted if e.endswith(f":log:{2**31 - 1}")),))
        assert cur.fetchone() == (2**63 - 1, 2**31 - 1)
        cur.execute("SELECT balance FROM balances WHERE user_id = %s", (rich,))
        assert cur.fetchone() == (Decimal("89999999999999999999.999999999999999999"),)
        # What can never be credited was acknowledged and kept, with the reason.
        cur.execute("SELECT reason, count(*) FROM ingest_notices WHERE detail->>'user_id' = %s"
                    " GROUP BY reason ORDER BY reason", (owner,))
        assert cur.fetchall() == [("amount_not_representable", 1), ("out_of_range", 5)]
        cur.execute("SELECT kind, reason FROM ingest_notices"
                    " WHERE detail->'activity'->>'toAddress' = %s AND kind <> 'ignored'",
                    (address,))
        assert cur.fetchall() == [("nft", "nft_transfer")]  # Alchemy's ERC-721 example
        cur.execute("SELECT reason, detail->'activity'->>'value' FROM ingest_notices"
                    " WHERE detail->'activity'->>'toAddress' = %s", (stranger,))
        assert cur.fetchall() == [("unknown_address", "inf")]  # 1e400, kept as text
        cur.execute("SELECT count(*) FROM payment_events WHERE user_id = %s"
                    " AND asset LIKE 'ETH_MAINNET:%%' AND provider = 'payments'", (owner,))
        assert cur.fetchone() == (0,)
