"""`paystream notifications list|show|redeliver|recover` against real deliveries."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from datetime import UTC, datetime, timedelta

from paystream.chaos.receiver import receiver
from paystream.launch import paystream_argv
from paystream.schema.db import Connection
from tests.integration.test_notify_delivery import PORT, _notifier, _slots
from tests.support.consumers import ProcessPool, create_topic, produce
from tests.support.ids import unique
from tests.support.notify import add_endpoint, intents, messages
from tests.support.waiting import wait_until


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(paystream_argv("notifications", *args), capture_output=True,
                          text=True, timeout=60)


def test_recover_resends_what_failed_and_redeliver_sends_again_under_the_same_id(
        db: Connection, pool: ProcessPool) -> None:
    user = unique("ntf-op")
    topic, dlq = unique("notify-op"), unique("notify-op-dlq")
    create_topic(topic, partitions=1)
    create_topic(dlq, partitions=1)
    started = datetime.now(UTC) - timedelta(seconds=5)
    batch = intents(unique("src"), user, 4)
    path = f"/flaky/2/{user}"  # 500, 500, then 200
    with receiver(PORT) as hooks:
        endpoint_id, secret = add_endpoint(hooks.url(path), user)
        hooks.secrets[path] = secret
        try:
            # One retry only: the second 500 spends the schedule, the slot fails.
            proc = _notifier(pool, (topic, dlq),
                             env={"PAYSTREAM_NOTIFY_RETRY_DELAYS_S": "0.2"})
            produce(topic, messages(batch))
            wait_until(lambda: len(_slots(db, endpoint_id)) == 4 and {
                s for s, _ in _slots(db, endpoint_id).values()} == {"failed"}, 60,
                "the deliveries failed for good", interval_s=0.5)
            listed = _cli("list", "--user", user, "--state", "failed")
            assert listed.returncode == 0 and listed.stdout.count("HTTP 500") == 4, listed
            recovered = _cli("recover", "--since", started.isoformat(), "--endpoint",
                             endpoint_id)
            assert recovered.returncode == 0 and "4 failed deliveries" in recovered.stdout
            wait_until(lambda: {s for s, _ in _slots(db, endpoint_id).values()}
                       == {"delivered"}, 60, "recovered deliveries", interval_s=0.5)
            first = batch[0].id
            again = _cli("redeliver", first)
            assert again.returncode == 0 and "1 deliveries due again" in again.stdout
            wait_until(lambda: Counter(hooks.ids(path))[first] == 4, 30,
                       "the redelivery", interval_s=0.5)
            shown = _cli("show", first)
            assert shown.returncode == 0 and shown.stdout.count(endpoint_id) == 5, shown
            assert proc.terminate() == 0, proc.tail()
        finally:
            with db.cursor() as cur:
                cur.execute("UPDATE notification_endpoints SET disabled_at = now()"
                            " WHERE endpoint_id = %s", (endpoint_id,))
    assert not hooks.bad
    # 500, 500 (failed), 200 after recover; the redelivery: a 4th, same id.
    assert Counter(hooks.ids(path)) == {i.id: (4 if i.id == first else 3) for i in batch}
    missing = _cli("redeliver", "ntf_" + "0" * 32)
    assert missing.returncode == 2 and "no intent" in missing.stderr
    bad_time = _cli("recover", "--since", "yesterday")
    assert bad_time.returncode == 2 and "not an ISO 8601 timestamp" in bad_time.stderr


def test_health_says_when_deliveries_are_due_and_nobody_sends(db: Connection) -> None:
    user = unique("ntf-health")
    endpoint_id, _ = add_endpoint("http://127.0.0.1:9/never", user)
    intent = intents(unique("src"), user, 1)[0]
    try:
        with db.cursor() as cur:
            cur.execute("INSERT INTO notification_intents (intent_id, type, user_id,"
                        " created_at, data) VALUES (%s, %s, %s, now(), '{}')",
                        (intent.id, intent.type.value, user))
            # Due two minutes ago, no sender running for it: past --stuck-after (60 s).
            cur.execute("INSERT INTO notification_deliveries (intent_id, endpoint_id,"
                        " next_attempt_at) VALUES (%s, %s, now() - interval '120 s')",
                        (intent.id, endpoint_id))
        done = subprocess.run(paystream_argv("health", "--check", "notifications", "--json"),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, done.stdout + done.stderr
        [row] = json.loads(done.stdout)
        assert row["verdict"] == "unhealthy" and float(row["value"].split()[0]) >= 120
    finally:
        with db.cursor() as cur:
            cur.execute("UPDATE notification_endpoints SET disabled_at = now()"
                        " WHERE endpoint_id = %s", (endpoint_id,))
