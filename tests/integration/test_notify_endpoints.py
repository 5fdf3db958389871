"""`paystream endpoints`: bad input refused with a reason, the secret shown once and never
readable by the operator's role, disable / enable, and a rotation both secrets verify."""

from __future__ import annotations

import psycopg2.errors
import pytest

from paystream.chaos.receiver import receiver
from paystream.schema.db import Connection, connect, database_url
from tests.integration.test_notify_delivery import PORT, _notifier
from tests.support.consumers import ProcessPool, create_topic, produce
from tests.support.ids import unique
from tests.support.notify import add_endpoint, endpoints_cli, intents, messages
from tests.support.waiting import wait_until


@pytest.mark.parametrize(("args", "reason"), [
    (["--url", "ftp://x/y"], "must be an http:// or https:// URL"),
    (["--url", "http://"], "must be an http:// or https:// URL"),
    (["--url", "http://x/ y"], "no spaces"),
    (["--url", "http://x/", "--events", "deposit"], "unknown event filter 'deposit'"),
    (["--url", "http://x/", "--user", "bad user"], "--user must match"),
    (["--url", "http://x/", "--user", "ntf-nobody"], "no user 'ntf-nobody'"),
    (["--url", "http://[::1/"], "is not a URL"),
    (["--url", "http://x:70000/"], "is not a URL"),
    (["--url", "https://me:secret@x/"], "must not carry credentials"),
])
def test_bad_input_is_refused_with_a_reason_and_nothing_written(db: Connection, args,
                                                                reason) -> None:
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM notification_endpoints")
        before = cur.fetchone()[0]
    done = endpoints_cli("add", *args)
    assert done.returncode == 2 and reason in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM notification_endpoints")
        assert cur.fetchone()[0] == before


def test_disable_enable_and_unknown_ids(db: Connection) -> None:
    user = unique("ntf-ep")
    endpoint_id, secret = add_endpoint("http://127.0.0.1:1/x", user, "deposit.*,shortfall.*")
    assert secret.startswith("whsec_")
    listed = endpoints_cli("list").stdout
    assert endpoint_id in listed and "deposit.*,shortfall.*" in listed
    assert secret not in listed
    assert endpoints_cli("disable", endpoint_id).returncode == 0
    again = endpoints_cli("disable", endpoint_id)
    assert again.returncode == 2 and "already disabled" in again.stderr
    assert endpoints_cli("enable", endpoint_id).returncode == 0
    missing = endpoints_cli("rotate-secret", "ep_" + "0" * 24)
    assert missing.returncode == 2 and "no endpoint" in missing.stderr
    assert endpoints_cli("disable", endpoint_id).returncode == 0
    # The operator's role writes a key and cannot read one back.
    ops = connect(database_url("ops"))
    try:
        with ops.cursor() as cur, pytest.raises(psycopg2.errors.InsufficientPrivilege):
            cur.execute("SELECT secret FROM notification_endpoints WHERE endpoint_id = %s",
                        (endpoint_id,))
    finally:
        ops.close()


def test_after_a_rotation_both_secrets_verify_the_same_delivery(
        db: Connection, pool: ProcessPool) -> None:
    user = unique("ntf-rot")
    topic, dlq = unique("notify-rot"), unique("notify-rot-dlq")
    create_topic(topic, partitions=1)
    create_topic(dlq, partitions=1)
    with receiver(PORT) as hooks:
        endpoint_id, old = add_endpoint(hooks.url(f"/ok/{user}/old"), user)
        rotated = endpoints_cli("rotate-secret", endpoint_id, "--overlap", "3600")
        assert rotated.returncode == 0, rotated.stderr
        new = rotated.stdout.split("secret: ")[1].split()[0]
        assert new != old and new.startswith("whsec_")
        # One receiver holds the old secret, a second the new: the same endpoint URL is
        # pointed at each in turn (the owner may change it; ops may not).
        hooks.secrets[f"/ok/{user}/old"] = old
        hooks.secrets[f"/ok/{user}/new"] = new
        with db.cursor() as cur:
            cur.execute("INSERT INTO notification_endpoints (endpoint_id, url, user_id, secret,"
                        " previous_secret, previous_secret_until) SELECT 'ep_' ||"
                        " substr(md5(random()::text), 1, 24), %s, user_id, secret,"
                        " previous_secret, previous_secret_until FROM notification_endpoints"
                        " WHERE endpoint_id = %s RETURNING endpoint_id",
                        (hooks.url(f"/ok/{user}/new"), endpoint_id))
            twin = cur.fetchone()[0]
        try:
            proc = _notifier(pool, (topic, dlq))
            batch = intents(unique("src"), user, 3)
            produce(topic, messages(batch))
            wait_until(lambda: len(hooks.ids(f"/ok/{user}/old")) == 3
                       and len(hooks.ids(f"/ok/{user}/new")) == 3, 60,
                       "deliveries verified under the old and the new secret", interval_s=0.5)
            assert proc.terminate() == 0, proc.tail()
        finally:
            with db.cursor() as cur:
                cur.execute("UPDATE notification_endpoints SET disabled_at = now()"
                            " WHERE endpoint_id = ANY(%s)", ([endpoint_id, twin],))
    assert not hooks.bad, hooks.bad[:3]
    assert sorted(hooks.ids(f"/ok/{user}/old")) == sorted(i.id for i in batch)
