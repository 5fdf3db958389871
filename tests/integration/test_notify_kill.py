"""1,000 intents while the notifier (its consumer and its sender, one process as `make
run` starts it) is SIGKILLed at random moments, some of them aimed at the windows between
claim and send and between send and record: every intent is delivered, never under two
webhook-ids, and a duplicate is only ever the same id sent again (counted and printed)."""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict

from paystream.chaos.receiver import receiver
from paystream.schema.db import Connection
from tests.integration.test_notify_delivery import PORT, _notifier, _slots
from tests.support.consumers import ProcessPool, create_topic, produce
from tests.support.ids import unique
from tests.support.notify import add_endpoint, intents, messages
from tests.support.waiting import wait_until

TOTAL = 1000
KILLS = 8


def test_a_thousand_intents_through_random_sigkills(db: Connection, pool: ProcessPool) -> None:
    rng = random.Random(15)
    user = unique("ntf-kill")
    topic, dlq = unique("notify-kill"), unique("notify-kill-dlq")
    create_topic(topic, partitions=6)
    create_topic(dlq, partitions=1)
    batch = intents(unique("src"), user, TOTAL)
    path = f"/ok/{user}"
    with receiver(PORT) as hooks:
        endpoint_id, secret = add_endpoint(hooks.url(path), user)
        hooks.secrets[path] = secret
        try:
            crash_hooks = ("PAYSTREAM_TEST_NOTIFY_CRASH_AFTER_CLAIM",
                           "PAYSTREAM_TEST_NOTIFY_CRASH_AFTER_SEND",
                           "PAYSTREAM_TEST_CRASH_AFTER_DB_COMMIT")
            proc = _notifier(pool, (topic, dlq))
            # Produced in parts while the kills go on, so the consumer is killed mid-batch
            # too, not only the sender.
            parts = [batch[i::KILLS] for i in range(KILLS)]
            kills = Counter[str]()
            armed = "none"
            for n, part in enumerate(parts):
                produce(topic, messages(part))
                time.sleep(rng.uniform(0.2, 1.5))
                if proc.alive():
                    proc.kill()  # a random moment
                    kills["random"] += 1
                else:
                    kills[f"aimed {armed}"] += 1  # it died by itself at its aimed moment
                env: dict[str, str] = {}
                armed = "none"
                if n % 2 == 0:
                    # The next process dies by itself at an aimed moment.
                    hook = crash_hooks[(n // 2) % len(crash_hooks)]
                    env = {hook: str(rng.randint(1, 30))}
                    armed = hook.removeprefix("PAYSTREAM_TEST_").lower()
                proc = _notifier(pool, (topic, dlq), env=env)
            # One last process, no hook, to finish.
            proc.kill()
            proc = _notifier(pool, (topic, dlq))
            wait_until(lambda: len(_slots(db, endpoint_id)) == TOTAL
                       and {s for s, _ in _slots(db, endpoint_id).values()} == {"delivered"},
                       180, "every slot delivered", interval_s=1)
            assert proc.terminate() == 0, proc.tail()
        finally:
            with db.cursor() as cur:
                cur.execute("UPDATE notification_endpoints SET disabled_at = now()"
                            " WHERE endpoint_id = %s", (endpoint_id,))
    assert not hooks.bad, hooks.bad[:3]
    seen = Counter(hooks.ids(path))
    assert set(seen) == {i.id for i in batch}  # every intent, each under its own id
    bodies: dict[str, set[str]] = defaultdict(set)
    for webhook_id, body in zip(hooks.ids(path), hooks.bodies(path), strict=True):
        assert body["id"] == webhook_id
        bodies[webhook_id].add(repr(sorted(body["data"].items())))
    assert all(len(b) == 1 for b in bodies.values())  # a retry sends the same content
    duplicates = sum(n - 1 for n in seen.values())
    assert sum(kills.values()) == KILLS
    print(f"\n{TOTAL} intents, {KILLS} kills {dict(kills)}: "
          f"{sum(seen.values())} deliveries, {duplicates} same-id duplicates")
