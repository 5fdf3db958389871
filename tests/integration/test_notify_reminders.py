"""Scheduled reminders: due inside their window, made once however often the scheduler
restarts there, a new cycle (a user's second shortfall) reminded again, a passed window
skipped, and the reminders delivered signed like any intent."""

from __future__ import annotations

import subprocess

from paystream.chaos.receiver import receiver
from paystream.launch import paystream_argv
from paystream.schema.db import Connection
from tests.integration.test_notify_delivery import PORT, _slots
from tests.support.ids import unique
from tests.support.notify import FAST, add_endpoint, start_sender
from tests.support.waiting import wait_until


def _remind_once() -> None:
    done = subprocess.run(paystream_argv("notify", "remind", "--once"), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "reminders made" in done.stdout, done.stderr


def _keys(db: Connection, user: str) -> list[str]:
    with db.cursor() as cur:
        cur.execute("SELECT reminder_key FROM notification_reminders"
                    " WHERE reminder_key LIKE %s ORDER BY reminder_key", (f"%:{user}:%",))
        return [row[0] for row in cur.fetchall()]


def _shortfall(db: Connection, user: str, age_s: float, resolved: bool = False) -> int:
    with db.cursor() as cur:
        cur.execute("INSERT INTO account_shortfalls (user_id, asset, source_event_id,"
                    " deposit_event_id, amount, created_at, resolved_at, resolution)"
                    " VALUES (%s, 'USD', %s, %s, 7.5, now() - make_interval(secs => %s),"
                    " CASE WHEN %s THEN now() END, CASE WHEN %s THEN 'paid' END)"
                    " RETURNING id",
                    (user, unique("sf-src"), unique("sf-dep"), age_s, resolved, resolved))
        return cur.fetchone()[0]


def test_reminders_are_made_once_per_cycle_and_delivered(db: Connection, tmp_path) -> None:
    user = unique("ntf-remind")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        cur.execute("INSERT INTO balances (user_id, asset) VALUES (%s, 'USD')", (user,))
    # Defaults: steps 1 h, 24 h, 72 h; a window of 180 s after each.
    first = _shortfall(db, user, 3600 + 5)          # its 1 h step is due
    older = _shortfall(db, user, 86_400 + 10)       # 24 h due; its 1 h window long passed
    _shortfall(db, user, 3600 + 5, resolved=True)   # resolved: nothing to remind
    _shortfall(db, user, 3600 + 600)                # between windows: nothing due
    hold_id = unique("hold")
    deposit_id = unique("dep")
    with db.cursor() as cur:
        cur.execute("INSERT INTO holds (hold_id, user_id, asset, provider, amount,"
                    " expires_at) VALUES (%s, %s, 'USD', 'payments', 3, now() + interval"
                    " '3595 seconds')", (hold_id, user))
        cur.execute("INSERT INTO chain_deposits (event_id, network, tx_hash, block_number,"
                    " recipient, raw_value, chain, user_id, asset, amount, trace_id,"
                    " recorded_at) VALUES (%s, 'ETH_MAINNET', '0xab', 1, '0xcd', 1, '{}',"
                    " %s, 'USD', 1, 't', now() - interval '3605 seconds')",
                    (deposit_id, user))
    path = f"/ok/{user}"
    with receiver(PORT) as hooks:
        endpoint_id, secret = add_endpoint(hooks.url(path), user, "reminder.*")
        hooks.secrets[path] = secret
        try:
            _remind_once()
            _remind_once()  # a restart inside the same windows: nothing new
            assert _keys(db, user) == sorted([
                f"deposit_waiting:{user}:{deposit_id}", f"hold_expiring:{user}:{hold_id}",
                f"shortfall_open_3600s:{user}:{first}",
                f"shortfall_open_86400s:{user}:{older}"])
            # A second cycle for the same user: its own reminder.
            second = _shortfall(db, user, 3600 + 5)
            _remind_once()
            assert f"shortfall_open_3600s:{user}:{second}" in _keys(db, user)
            assert len(_keys(db, user)) == 5
            sender = start_sender(tmp_path, FAST)
            wait_until(lambda: len(hooks.ids(path)) >= 5, 60, "the reminders delivered",
                       interval_s=0.5)
            assert sender.terminate() == 0, sender.tail()
            assert {s for s, _ in _slots(db, endpoint_id).values()} == {"delivered"}
        finally:
            with db.cursor() as cur:
                cur.execute("UPDATE notification_endpoints SET disabled_at = now()"
                            " WHERE endpoint_id = %s", (endpoint_id,))
    assert not hooks.bad, hooks.bad[:3]
    assert len(set(hooks.ids(path))) == len(hooks.ids(path)) == 5
    bodies = hooks.bodies(path)
    assert {b["data"]["reminder_key"] for b in bodies} == set(_keys(db, user))
    assert {b["type"] for b in bodies} == {"reminder.shortfall_open",
                                          "reminder.deposit_waiting",
                                          "reminder.hold_expiring"}
    shortfall = next(b for b in bodies if b["data"].get("shortfall_id") == first)
    assert shortfall["data"]["amount"] == "7.5" and shortfall["data"]["user_id"] == user
