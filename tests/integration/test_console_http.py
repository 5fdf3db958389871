"""The operator console over HTTP, against the test stack's Postgres: who gets in, what a
POST must carry, and what each action does to the rows it acts on (read back from
Postgres, not from the console) and to the audit record. The browser's view of the same
pages (rendering, script, screenshots) is test_console_browser.py."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from decimal import Decimal

import pytest
import requests

from paystream.api import keys
from paystream.invoices.create import InvoiceRequest, create
from paystream.launch import paystream_argv
from paystream.notify.intents import now_text
from paystream.notify.seal import process_sealer
from paystream.schema import merchants
from paystream.schema.db import Connection, connect, database_url
from paystream.schema.events import EventType, PaymentEvent
from tests.support.console import (
    SESSION_COOKIE,
    ConsoleServer,
    csrf_of,
    make_key,
    start_console,
)
from tests.support.consumers import store_events
from tests.support.ids import unique
from tests.support.notify import add_endpoint

HOSTILE = '<script>alert(1)</script>"><img src=x onerror="alert(2)">'


@pytest.fixture(scope="module")
def console() -> Iterator[ConsoleServer]:
    server = start_console(unique("http-operator"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def operator(console: ConsoleServer) -> requests.Session:
    return console.login()


def _dead_letter(db: Connection, reason: str, payload: str = "{}", event_id: str | None = None
                 ) -> int:
    """A dead letter as the mirror writes one, at an origin of its own."""
    with db.cursor() as cur:
        cur.execute("INSERT INTO dead_letter_queue (source_topic, source_partition,"
                    " source_offset, message_key, headers, payload, event_id, error_reason,"
                    " error_detail) VALUES (%s, 0, 0, 'k', '{}', %s, %s, %s, 'test detail')"
                    " RETURNING id", (unique("console-topic"), payload, event_id, reason))
        return int(cur.fetchone()[0])


def _actions(db: Connection, action: str, target: str) -> list[tuple[str, str, str]]:
    with db.cursor() as cur:
        cur.execute("SELECT actor, result, detail FROM operator_actions WHERE action = %s"
                    " AND target = %s ORDER BY id", (action, target))
        return [tuple(r) for r in cur.fetchall()]


def test_every_answer_carries_the_security_headers_and_other_hosts_are_refused(
        console: ConsoleServer) -> None:
    page = requests.get(console.url + "/login", timeout=10)
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp  # no script at all
    assert "frame-ancestors 'none'" in csp and page.headers["x-frame-options"] == "DENY"
    cookie = page.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    # DNS rebinding: a page elsewhere whose name resolves to the loopback.
    rebound = requests.get(console.url + "/login", headers={"Host": "evil.example"},
                           timeout=10)
    assert rebound.status_code == 400
    # A Host is a name and an optional port, nothing else: user info, a path, a second
    # port or a port past 65535 name no host of ours, whatever the allowed name they hold.
    for host in ("localhost:1@evil.example", "localhost@evil.example", "127.0.0.1/x",
                 "localhost:80:81", "localhost:99999", "localhost:", "localhost evil",
                 "[::1", "", f"127.0.0.1:{console.port}#"):
        refused = requests.get(console.url + "/login", headers={"Host": host}, timeout=10)
        assert refused.status_code == 400, (host, refused.status_code)
    for host in (f"127.0.0.1:{console.port}", "LOCALHOST", f"localhost:{console.port}"):
        allowed = requests.get(console.url + "/login", headers={"Host": host}, timeout=10)
        assert allowed.status_code == 200, (host, allowed.status_code)
    # A form posted from another origin, even with a session's cookie.
    foreign = requests.post(console.url + "/login", data={"key": console.key},
                            headers={"Origin": "http://evil.example"}, timeout=10)
    assert foreign.status_code == 403
    # No API document or docs page to read the routes from.
    assert requests.get(console.url + "/openapi.json", timeout=10).status_code == 404


def test_a_wrong_a_malformed_and_a_revoked_key_do_not_open_it(
        console: ConsoleServer, db: Connection) -> None:
    wrong = "pck_" + "A" * 43
    for key in (wrong, "not-a-key", ""):
        with pytest.raises(AssertionError, match="401"):
            console.login(key)
    assert _actions(db, "login", "pck_AAAA...")[-1][:2] == ("anonymous", "refused")
    key_id, key = make_key(unique("revoked"))
    http = console.login(key)
    assert http.get(console.url + "/search", allow_redirects=False, timeout=10
                    ).status_code == 200
    subprocess.run(paystream_argv("console", "keys", "revoke", key_id), check=True,
                   capture_output=True, timeout=60)
    # Its live session ends with it, and it opens no new one.
    ended = http.get(console.url + "/search", allow_redirects=False, timeout=10)
    assert (ended.status_code, ended.headers["location"]) == (303, "/login")
    with pytest.raises(AssertionError, match="401"):
        console.login(key)


def test_an_expired_session_goes_back_to_the_login(console: ConsoleServer,
                                                   db: Connection) -> None:
    http = console.login()
    token = http.cookies[SESSION_COOKIE]
    with db.cursor() as cur:
        cur.execute("UPDATE console_sessions SET expires_at = now() - interval '1 second'"
                    " WHERE session_hash = %s",
                    (hashlib.sha256(token.encode()).hexdigest(),))
        assert cur.rowcount == 1  # only the hash of the cookie's token is stored
    gone = http.get(console.url + "/dead-letters", allow_redirects=False, timeout=10)
    assert (gone.status_code, gone.headers["location"]) == (303, "/login")


def test_a_post_without_this_sessions_csrf_token_is_refused_and_recorded(
        console: ConsoleServer, operator: requests.Session, db: Connection) -> None:
    dlq_id = _dead_letter(db, unique("csrf-reason"))
    other = console.login()  # another session's token is not this one's
    other_token = csrf_of(other.get(console.url + "/ledger", timeout=10).text)
    for form in ({"reason": "no token"}, {"reason": "other", "csrf": other_token}):
        refused = operator.post(f"{console.url}/dead-letters/{dlq_id}/discard", data=form,
                                timeout=10)
        assert refused.status_code == 403, refused.text[:300]
    with db.cursor() as cur:
        cur.execute("SELECT status FROM dead_letter_queue WHERE id = %s", (dlq_id,))
        assert cur.fetchone()[0] == "open"
    assert [r[1] for r in _actions(db, "csrf_refused", f"/dead-letters/{dlq_id}/discard")
            ] == ["refused", "refused"]


def test_discard_says_why_from_the_console_and_the_cli(
        console: ConsoleServer, operator: requests.Session, db: Connection) -> None:
    first, second = _dead_letter(db, "schema"), _dead_letter(db, "schema")
    page = operator.get(f"{console.url}/dead-letters/{first}", timeout=10)
    csrf = csrf_of(page.text)
    blank = operator.post(f"{console.url}/dead-letters/{first}/discard",
                          data={"csrf": csrf, "reason": "  "}, timeout=10)
    assert blank.status_code == 409 and "say why" in blank.text
    done = operator.post(f"{console.url}/dead-letters/{first}/discard",
                         data={"csrf": csrf, "reason": "a test record, never money"},
                         timeout=10)
    assert done.status_code == 200, done.text[:300]
    cli = subprocess.run(paystream_argv("dlq", "discard", str(second), "--reason", "dup"),
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    again = subprocess.run(paystream_argv("dlq", "discard", str(second), "--reason", "x"),
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "discarded, not open" in again.stderr
    with db.cursor() as cur:
        cur.execute("SELECT id, status, discard_reason FROM dead_letter_queue"
                    " WHERE id IN (%s, %s) ORDER BY id", (first, second))
        assert cur.fetchall() == [(first, "discarded", "a test record, never money"),
                                  (second, "discarded", "dup")]
    results = [r[1] for r in _actions(db, "dlq_discard", f"dead letter {first}")]
    assert results == ["refused", "done"]


def test_a_bulk_replay_counts_first_and_refuses_what_has_no_stored_event(
        console: ConsoleServer, operator: requests.Session, db: Connection) -> None:
    reason = unique("bulk-reason")
    ids = [_dead_letter(db, reason) for _ in range(3)]
    confirm = operator.get(f"{console.url}/dead-letters-bulk",
                           params={"status": "open", "reason": reason}, timeout=10)
    assert "3 dead letter(s) will be replayed" in confirm.text
    done = operator.post(f"{console.url}/dead-letters-bulk",
                         data={"csrf": csrf_of(confirm.text), "reason": reason,
                               "provider": "", "age": "", "count": "3"}, timeout=10)
    assert "0 replayed, 3 refused" in done.text
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM dead_letter_queue WHERE id = ANY(%s)"
                    " AND status = 'open'", (ids,))
        assert cur.fetchone()[0] == 3  # nothing was sent, nothing changed
    for dlq_id in ids:
        assert [r[1] for r in _actions(db, "dlq_replay", f"dead letter {dlq_id}")
                ] == ["refused"]


def test_search_finds_an_event_by_its_id_trace_and_user_and_shows_bodies_as_text(
        console: ConsoleServer, operator: requests.Session, db: Connection) -> None:
    user = unique("console-user")
    event = PaymentEvent(unique("console-ev"), EventType.DEPOSIT, user, "USDC",
                         Decimal("3.5"), "test", reason=HOSTILE)
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        store_events(cur, [event])
    for query in (event.event_id, "trace-" + event.event_id, user):
        found = operator.get(console.url + "/search", params={"q": query}, timeout=10)
        assert f'href="/events/{event.event_id}"' in found.text, query
    page = operator.get(f"{console.url}/events/{event.event_id}", timeout=10)
    assert page.status_code == 200
    body = page.text.split('id="body">', 1)[1]
    assert "<script" not in body and "<img" not in body
    assert json.dumps(HOSTILE)[1:-1].replace("<", "&lt;").replace(">", "&gt;").replace(
        '"', "&#34;") in body


def test_resolving_a_shortfall_needs_a_resolution_and_lifts_the_flag(
        console: ConsoleServer, operator: requests.Session, db: Connection) -> None:
    user = unique("console-owes")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        cur.execute("INSERT INTO balances (user_id, asset) VALUES (%s, 'USDC')", (user,))
        cur.execute("INSERT INTO account_shortfalls (user_id, asset, source_event_id,"
                    " deposit_event_id, amount) VALUES (%s, 'USDC', %s, %s, 2) RETURNING id",
                    (user, unique("rev"), unique("dep")))
        shortfall = cur.fetchone()[0]
    page = operator.get(console.url + "/ledger", timeout=10)
    assert f"/shortfalls/{shortfall}/resolve" in page.text
    csrf = csrf_of(page.text)
    blank = operator.post(f"{console.url}/shortfalls/{shortfall}/resolve",
                          data={"csrf": csrf, "resolution": ""}, timeout=10)
    assert blank.status_code == 409
    done = operator.post(f"{console.url}/shortfalls/{shortfall}/resolve",
                         data={"csrf": csrf, "resolution": "recovered by wire"}, timeout=10)
    assert "no longer flagged" in done.text
    with db.cursor() as cur:
        cur.execute("SELECT resolution FROM account_shortfalls WHERE id = %s", (shortfall,))
        assert cur.fetchone()[0] == "recovered by wire"
    assert [r[1] for r in _actions(db, "shortfall_resolve", f"shortfall {shortfall}")
            ] == ["refused", "done"]


def test_reconcile_now_runs_every_features_check_as_the_command_does(
        console: ConsoleServer, operator: requests.Session, db: Connection) -> None:
    # An invoice of this test's own, so the invoices' check has at least one to count.
    user = unique("console-rec")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            status, answer, _ = create(
                cur, key_id=None, idempotency_key=None, created_at_text=now_text(),
                sealer=process_sealer(), wanted=InvoiceRequest(user, "USD", Decimal(3), 3600))
    finally:
        conn.close()
    assert status == 201, answer
    csrf = csrf_of(operator.get(console.url + "/ledger", timeout=10).text)
    ran = operator.post(console.url + "/ledger/reconcile", data={"csrf": csrf}, timeout=120)
    assert ran.status_code == 200, ran.text[:300]
    # Clean or not (other tests' rows are there too), the report counts the invoices
    # checked, as `paystream reconcile` does: "N invoices match their payments" or
    # "... and N invoices".
    detail = _actions(db, "reconcile", "whole ledger")[-1][2]
    assert re.search(r"\b[1-9][0-9]* invoices\b", detail), detail


def test_an_endpoint_is_disabled_with_a_reason_and_enabled_again(
        console: ConsoleServer, operator: requests.Session, db: Connection) -> None:
    endpoint_id, _ = add_endpoint("http://127.0.0.1:9/hook", unique("console-ep-user"))
    csrf = csrf_of(operator.get(console.url + "/endpoints", timeout=10).text)
    operator.post(f"{console.url}/endpoints/{endpoint_id}/disable",
                  data={"csrf": csrf, "reason": "merchant asked"}, timeout=10)
    with db.cursor() as cur:
        cur.execute("SELECT disabled_reason FROM notification_endpoints"
                    " WHERE endpoint_id = %s", (endpoint_id,))
        assert cur.fetchone()[0] == "merchant asked"
    operator.post(f"{console.url}/endpoints/{endpoint_id}/enable", data={"csrf": csrf},
                  timeout=10)
    with db.cursor() as cur:
        cur.execute("SELECT disabled_at FROM notification_endpoints WHERE endpoint_id = %s",
                    (endpoint_id,))
        assert cur.fetchone()[0] is None
        # Left disabled: no notifier of a later test sends to this address.
        cur.execute("UPDATE notification_endpoints SET disabled_at = now(),"
                    " disabled_reason = 'test done' WHERE endpoint_id = %s", (endpoint_id,))
    audit = operator.get(console.url + "/audit", timeout=10).text
    assert "endpoint_disable" in audit and "endpoint_enable" in audit


def test_a_merchants_keys_are_listed_and_one_is_revoked(
        console: ConsoleServer, operator: requests.Session, db: Connection) -> None:
    with db.cursor() as cur:
        shop = merchants.add(cur, unique("console-shop"))
        other = merchants.add(cur, unique("console-other"))
        mine, _ = keys.create(cur, "checkout", keys.parse_scopes("balances:read"),
                              shop.merchant_id)
        theirs, _ = keys.create(cur, "theirs", keys.parse_scopes("read"), other.merchant_id)
    page = operator.get(console.url + "/keys", params={"merchant": shop.merchant_id},
                        timeout=10).text
    assert mine.key_id in page and "balances:read" in page and theirs.key_id not in page
    operator.post(f"{console.url}/keys/{mine.key_id}/revoke",
                  data={"csrf": csrf_of(page), "merchant": shop.merchant_id}, timeout=10)
    with db.cursor() as cur:
        cur.execute("SELECT key_id FROM api_keys WHERE revoked_at IS NOT NULL"
                    " AND key_id = ANY(%s)", ([mine.key_id, theirs.key_id],))
        assert cur.fetchall() == [(mine.key_id,)]
    assert _actions(db, "apikey_revoke", mine.key_id)[0][1] == "done"


def _fail_logins(server: ConsoleServer, count: int, forwarded: bool = False
                 ) -> list[requests.Response]:
    """`count` logins with a key nobody made, each (if `forwarded`) naming another client
    in X-Forwarded-For; the answers."""
    wrong = "pck_" + secrets.token_urlsafe(32)
    answers = []
    with requests.Session() as http:
        for i in range(count):
            token = re.search(r'name="login_csrf" value="([^"]+)"',
                              http.get(server.url + "/login", timeout=10).text)
            assert token
            answers.append(http.post(
                server.url + "/login", data={"key": wrong, "login_csrf": token.group(1)},
                headers={"X-Forwarded-For": f"203.0.113.{i}"} if forwarded else {},
                allow_redirects=False, timeout=10))
    return answers


def test_failed_logins_from_one_address_are_limited_whatever_it_forwards(
        db: Connection) -> None:
    """A console of its own: the limit would refuse the other tests' logins too. Each
    attempt names another client in X-Forwarded-For, and the limit is the socket's."""
    server = start_console(unique("limited-operator"))
    try:
        audit_before = _login_refusals(db)
        answers = _fail_logins(server, 12, forwarded=True)
        codes = [a.status_code for a in answers]
        assert codes == [401] * 10 + [429, 429], codes
        # The default: one more failed login a minute (docs/console.md).
        assert 55 <= int(answers[-1].headers["retry-after"]) <= 60, answers[-1].headers
        # While the bucket refills, the right key waits too (the limit is the address's).
        with pytest.raises(AssertionError, match="429"):
            server.login()
        # The limited attempts write no audit row.
        assert _login_refusals(db) - audit_before == 10
    finally:
        server.stop()


def test_the_failed_login_limit_refills_at_its_rate(db: Connection) -> None:
    """Two failures, then one more per second (60 a minute): after Retry-After exactly
    one attempt is let through, and the next is limited again."""
    server = start_console(unique("refill-operator"), {
        "PAYSTREAM_CONSOLE_LOGIN_FAILURE_BURST": "2",
        "PAYSTREAM_CONSOLE_LOGIN_FAILURES_PER_MINUTE": "60"})
    try:
        codes = [a.status_code for a in _fail_logins(server, 3)]
        assert codes == [401, 401, 429], codes
        time.sleep(1.1)
        codes = [a.status_code for a in _fail_logins(server, 2)]
        assert codes == [401, 429], codes
        time.sleep(1.1)
        assert server.login() is not None  # the right key, once a token is back
    finally:
        server.stop()


def _login_refusals(db: Connection) -> int:
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM operator_actions WHERE action = 'login'"
                    " AND result = 'refused'")
        return int(cur.fetchone()[0])
