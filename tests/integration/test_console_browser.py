"""The operator console in a real browser (Debian's headless chromium, driven by
selenium): logging in through the form; a poison event's whole story, from its dead
letter through the replay to the ledger's credit; hostile bodies rendered as inert text;
the refusals (a POST without the CSRF token or from another origin, a wrong key, an
expired session, the ingest's public port); and a screenshot of each main page, kept
under .test-artifacts/console/ (docs/console.md shows some).

What an action did is read back from Postgres, from a recorder server, and from the
ledger (the replay flows through the outbox, Debezium and Kafka to a ledger consumer),
never from the console's own word. One console, one browser and one dead letter serve
the whole module. The same pages over plain HTTP: test_console_http.py."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast
from urllib.parse import quote, urlencode, urlsplit

import psycopg2
import pytest
import requests
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By

from paystream.chaos.receiver import LOOPBACK_GUARD
from paystream.consumers.dead_letters import send as dlq
from paystream.launch import paystream_argv
from paystream.notify import endpoints
from paystream.notify.intents import IntentType, intent_id
from paystream.schema.db import Connection, connect, database_url
from paystream.schema.events import PAYMENTS_TOPIC, EventType, PaymentEvent
from paystream.stack.kafka import start_group_at_end
from tests.support.browser import (
    HEIGHT,
    WIDTH,
    Recorder,
    Screenshots,
    artifacts_dir,
    chromium,
    in_ci,
    png_size,
    security_messages,
)
from tests.support.console import SESSION_COOKIE, ConsoleServer, start_console
from tests.support.consumers import (
    ProcessPool,
    create_topic,
    produce,
    record_of,
    store_events,
    wire_message,
)
from tests.support.ids import unique
from tests.support.ingest import ingest_server
from tests.support.waiting import wait_for, wait_until

OPERATOR = unique("browser-operator")  # the key's name: what the audit and the nav show
ORIGIN_REFUSED = "a POST from another origin is refused"
POISON_AMOUNT = Decimal("7.25")
# The main pages, each screenshot under its name, with the heading that shows it is the
# page and not an error page ({user}, {event}, {dlq}: the poison event's).
MAIN_PAGES = (
    ("login", "/login", "Log in"),
    ("search", "/search?q={user}", "Search"),
    ("event", "/events/{event}", "Event {event}"),
    ("user", "/users/{user}", "User {user}"),
    ("dead-letters", "/dead-letters?status=all", "Dead letters"),
    ("dead-letter", "/dead-letters/{dlq}", "Dead letter {dlq}"),
    ("dead-letters-bulk", "/dead-letters-bulk?status=open&reason={reason}",
     "Replay open dead letters"),
    ("notifications", "/notifications?state=all", "Notifications"),
    ("notification", "/notifications/{intent}", "Notification {intent}"),
    ("endpoints", "/endpoints", "Endpoints"),
    ("ledger", "/ledger", "Ledger"),
    ("health", "/health", "Health:"),
    ("alerts", "/alerts", "Alerts"),
    ("audit", "/audit", "Operator actions"),
)


# -- the module's console, browser, dead letter ----------------------------------------

@pytest.fixture(scope="module")
def console() -> Iterator[ConsoleServer]:
    server = start_console(OPERATOR)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots() -> Screenshots:
    return Screenshots(artifacts_dir())


@pytest.fixture(scope="module")
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def owner() -> Iterator[Connection]:
    """The module fixtures' own owner connection (`db` is one test's)."""
    try:
        conn = connect(database_url("owner"))
    except psycopg2.OperationalError as exc:
        pytest.fail(f"Postgres is not reachable ({exc}); run `paystream stack up`")
    conn.autocommit = True
    try:
        yield conn
    finally:
        conn.close()


@dataclass(frozen=True)
class Poison:
    """A deposit dead-lettered because its user did not exist, mirrored into
    dead_letter_queue by a running dlq-mirror; a ledger consumer waits for its replay."""

    dlq_id: int
    event: PaymentEvent
    cause: str
    pool: ProcessPool


@pytest.fixture(scope="module")
def poison(owner: Connection, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Poison]:
    # As test_dlq_replay.py makes one: the event stored as the ingest stores it, and the
    # dead letter the ledger produced for it on a DLQ topic the mirror reads.
    pool = ProcessPool(tmp_path_factory.mktemp("console-browser-consumers"))
    group, mirror_group = unique("browser-ledger"), unique("browser-mirror")
    dlq_topic = unique("browser-dlq")
    try:
        create_topic(dlq_topic)
        start_group_at_end(group, PAYMENTS_TOPIC)  # this ledger applies only the replay
        pool.start("ledger", topic=PAYMENTS_TOPIC, group=group, dlq_topic=dlq_topic,
                   extra_args=["--batch-timeout", "0.05"])
        pool.start("dlq-mirror", topic=dlq_topic, group=mirror_group,
                   dlq_topic=dlq_topic + ".x", extra_args=["--batch-timeout", "0.05"])
        user = unique("browser-user")  # not created yet: the cause of the dead letter
        event = PaymentEvent(unique("browser-ev"), EventType.DEPOSIT, user, "USDC",
                             POISON_AMOUNT, "test")
        with owner.cursor() as cur:
            store_events(cur, [event])
        message = wire_message(event)
        cause = f"user {user!r} does not exist"
        letter = dlq.DeadLetter(record_of(message, offset=int.from_bytes(os.urandom(5), "big")),
                                "unknown_user", cause)
        headers = cast("list[tuple[str, bytes]]", dlq.dlq_headers(letter, group))
        produce(dlq_topic, [(message[0], message[1], headers)])
        try:
            wait_until(lambda: _one(owner, "SELECT status FROM event_status"
                                           " WHERE event_id = %s", event.event_id)
                       == ("dead_lettered",), 60, "the poison event mirrored, dead_lettered")
        except AssertionError:
            raise AssertionError(pool.logs()) from None
        found = _one(owner, "SELECT id FROM dead_letter_queue WHERE event_id = %s",
                     event.event_id)
        assert found is not None
        yield Poison(int(found[0]), event, cause, pool)
    finally:
        pool.kill_all()


@dataclass(frozen=True)
class Hostile:
    """A stored event and a dead letter whose every shown value is markup aimed at the
    recorder."""

    markup: str
    reason: str
    event_id: str
    dlq_id: int


@pytest.fixture(scope="module")
def hostile(owner: Connection, recorder: Recorder) -> Iterator[Hostile]:
    at = recorder.url
    markup = (f"<script>alert(1)</script><script>fetch('{at}/script')</script>"
              f"\"><img src=x onerror=\"fetch('{at}/img')\">"
              f"'><svg onload=\"fetch('{at}/svg')\"></svg><img src=\"{at}/src\">")
    reason = unique("hostile") + f"\"><img src=x onerror=\"fetch('{at}/reason')\">"
    event = PaymentEvent(unique("browser-hostile-ev"), EventType.DEPOSIT,
                         unique("browser-hostile-user"), "USDC", Decimal("1.5"), "test",
                         reason=markup)
    with owner.cursor() as cur:
        store_events(cur, [event])
        cur.execute("INSERT INTO dead_letter_queue (source_topic, source_partition,"
                    " source_offset, message_key, headers, payload, event_id, error_reason,"
                    " error_detail) VALUES (%s, 0, 0, %s, %s, %s, %s, %s, %s) RETURNING id",
                    (unique("browser-hostile-topic") + markup, markup,
                     json.dumps({"trace_id": markup}), markup, event.event_id, reason,
                     markup))
        (dlq_id,) = cur.fetchone() or (None,)
    yield Hostile(markup, reason, event.event_id, int(dlq_id))
    with owner.cursor() as cur:  # out of the open list of whoever looks at this stack
        cur.execute("UPDATE dead_letter_queue SET status = 'discarded', discard_reason ="
                    " 'a browser test record' WHERE id = %s AND status = 'open'", (dlq_id,))


@pytest.fixture
def operator(browser: WebDriver, console: ConsoleServer) -> WebDriver:
    """The shared browser with a live session (a test before may have ended it)."""
    browser.get(console.url + "/search")
    if _path(browser) != "/search":
        _log_in(browser, console)
    return browser


# -- helpers ---------------------------------------------------------------------------

def _one(db: Connection, sql: str, *params: object) -> tuple[Any, ...] | None:
    with db.cursor() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
        return None if row is None else tuple(row)


def _path(driver: WebDriver) -> str:
    return urlsplit(driver.current_url).path


def _submit_login(driver: WebDriver, console: ConsoleServer, key: str) -> str:
    """Type `key` into the login form and log in: where the browser lands, or
    ORIGIN_REFUSED if the Guard refused the POST."""
    driver.get(console.url + "/login")
    driver.find_element(By.ID, "key").send_keys(key)
    driver.find_element(By.ID, "login").click()

    def answered() -> str | None:
        try:
            if driver.find_elements(By.TAG_NAME, "h1"):  # a console page: where it is
                return _path(driver) if _path(driver) != "/login" or _text(driver, "error") \
                    else None
            body = driver.find_elements(By.TAG_NAME, "body")
            return ORIGIN_REFUSED if body and body[0].text == ORIGIN_REFUSED else None
        except StaleElementReferenceException:  # read while the next page came
            return None

    return wait_for("the login's answer", answered, 15)


def _log_in(driver: WebDriver, console: ConsoleServer) -> None:
    landed = _submit_login(driver, console, console.key)
    assert landed == "/search", landed


def _text(driver: WebDriver, element_id: str) -> str:
    """The element's text as shown (rendered, whitespace collapsed), "" if absent."""
    try:
        found = driver.find_elements(By.ID, element_id)
        return found[0].text if found else ""
    except StaleElementReferenceException:  # read while the next page came
        return ""


def _content(driver: WebDriver, element_id: str) -> str:
    """The element's text exactly as in the DOM."""
    return driver.find_element(By.ID, element_id).get_attribute("textContent") or ""


def _session_token(driver: WebDriver) -> str:
    cookie = driver.get_cookie(SESSION_COOKIE)
    assert cookie is not None, "the browser holds no session cookie"
    assert cookie.get("httpOnly") is True  # no page script could read it
    return str(cookie["value"])


def _actor(console: ConsoleServer) -> str:
    return f"{console.key_id} ({OPERATOR})"


def _actions(db: Connection, actor: str, after_id: int) -> list[tuple[str, str, str]]:
    """(action, target, result) of `actor`'s records after `after_id`, oldest first."""
    with db.cursor() as cur:
        cur.execute("SELECT action, target, result FROM operator_actions WHERE actor = %s"
                    " AND id > %s ORDER BY id", (actor, after_id))
        return [tuple(r) for r in cur.fetchall()]


def _last_action(db: Connection) -> int:
    return int((_one(db, "SELECT coalesce(max(id), 0) FROM operator_actions") or (0,))[0])


def _rows(driver: WebDriver, table_id: str) -> list[list[str]]:
    return [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tr")][1:]


def _assert_no_alert(driver: WebDriver) -> None:
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert  # noqa: B018 - the property raises when there is none


def _post(console: ConsoleServer, path: str, token: str, form: dict[str, str],
          origin: str | None = None) -> requests.Response:
    """A POST with the browser's session cookie, as another site (or a script) would
    send it: requests addresses the console as 127.0.0.1:PORT, the Host it accepts."""
    headers = {} if origin is None else {"Origin": origin}
    return requests.post(console.url + path, data=form, cookies={SESSION_COOKIE: token},
                         headers=headers, allow_redirects=False, timeout=30)


# -- the tests -------------------------------------------------------------------------

def test_logging_in_through_the_form_lands_on_search(browser: WebDriver,
                                                     console: ConsoleServer,
                                                     db: Connection) -> None:
    browser.delete_all_cookies()
    browser.get(console.url + "/dead-letters")
    assert _path(browser) == "/login"  # no session: the login form, nothing else
    assert browser.find_elements(By.TAG_NAME, "nav") == []
    before = _last_action(db)
    _log_in(browser, console)
    assert browser.find_element(By.CSS_SELECTOR, "header .who").text == OPERATOR
    assert browser.find_element(By.TAG_NAME, "h1").text == "Search"
    # The session is the stored one of this cookie (only its hash is kept), of this key.
    token = _session_token(browser)
    assert _one(db, "SELECT key_id, ended_at FROM console_sessions WHERE session_hash = %s"
                    " AND expires_at > now()", hashlib.sha256(token.encode()).hexdigest()
                ) == (console.key_id, None)
    assert _actions(db, _actor(console), before) == [("login", console.key_id, "done")]


def test_the_browsers_own_form_posts_are_accepted(browser: WebDriver, console: ConsoleServer,
                                                  db: Connection) -> None:
    """The login and the logout, POSTed by the browser as it is: its Origin header (the
    Referrer-Policy decides whether it is the origin or "null") passes the Guard."""
    browser.delete_all_cookies()
    assert _submit_login(browser, console, console.key) == "/search"
    session = hashlib.sha256(_session_token(browser).encode()).hexdigest()
    browser.find_element(By.CSS_SELECTOR, "form.logout button[type=submit]").click()
    wait_until(lambda: _path(browser) == "/login", 15, "the logout")
    assert _one(db, "SELECT ended_at IS NOT NULL FROM console_sessions"
                    " WHERE session_hash = %s", session) == (True,)


def test_a_poison_event_is_found_fixed_replayed_and_applied(
        operator: WebDriver, console: ConsoleServer, poison: Poison, db: Connection,
        shots: Screenshots) -> None:
    driver, event, dlq_id = operator, poison.event, poison.dlq_id
    # Found as an operator finds it: the dead letters filtered by its reason.
    driver.get(console.url + "/dead-letters")
    driver.find_element(By.CSS_SELECTOR, "form.filters input[name=reason]").send_keys(
        "unknown_user")
    driver.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]").click()
    wait_until(lambda: "reason=unknown_user" in driver.current_url, 15, "the filtered list")
    driver.find_element(By.CSS_SELECTOR, f'#dead-letters a[href="/dead-letters/{dlq_id}"]'
                        ).click()
    wait_until(lambda: _path(driver) == f"/dead-letters/{dlq_id}", 15, "the dead letter")
    assert _text(driver, "dlq-status") == "open"
    assert _text(driver, "cause") == poison.cause  # as the mirror stored it from Kafka
    shots.take(driver, "dead-letter-open")

    # The cause fixed as an operator fixes it.
    subprocess.run(paystream_argv("users", "add", event.user_id), check=True,
                   capture_output=True, timeout=60)
    # A replay forged with the session's cookie but without the form's token does
    # nothing, and is recorded.
    before = _last_action(db)
    forged = _post(console, f"/dead-letters/{dlq_id}/replay", _session_token(driver),
                   {"from": "another site"})
    assert forged.status_code == 403, forged.text[:300]
    assert _one(db, "SELECT status FROM dead_letter_queue WHERE id = %s", dlq_id) == ("open",)
    assert _actions(db, _actor(console), before) == [
        ("csrf_refused", f"/dead-letters/{dlq_id}/replay", "refused")]

    driver.find_element(By.ID, "replay").click()
    wait_until(lambda: _text(driver, "message").startswith("replayed"), 15, "the replay")
    assert _text(driver, "message").startswith(f"replayed: event {event.event_id} sent")
    assert _text(driver, "dlq-status") == "replayed"
    assert driver.find_elements(By.ID, "replay") == []  # replayed once, no second button
    shots.take(driver, "dead-letter-replayed")

    # Through the outbox, Debezium and Kafka, the ledger consumer applies it.
    def shown_status() -> str:
        driver.get(f"{console.url}/events/{quote(event.event_id, safe='')}")
        return _text(driver, "status")

    try:
        wait_until(lambda: shown_status() == "applied", 60, "the event page: applied")
    except AssertionError:
        raise AssertionError(poison.pool.logs()) from None
    assert [td.text for td in driver.find_elements(By.CSS_SELECTOR, "td.outcome")] == \
        ["applied"]
    assert f"dead-lettered: unknown_user (dead letter {dlq_id})" in _text(driver, "timeline")
    driver.get(f"{console.url}/users/{quote(event.user_id, safe='')}")
    assert _rows(driver, "balances")[0][:2] == ["USDC", "7.25"]
    # Evidence not from the console: the ledger's own rows.
    assert _one(db, "SELECT balance FROM balances WHERE user_id = %s AND asset = 'USDC'",
                event.user_id) == (POISON_AMOUNT,)
    assert _one(db, "SELECT count(*) FROM user_entries WHERE book = 'available'"
                    " AND source_event_id = %s", event.event_id) == (1,)
    assert _one(db, "SELECT status FROM event_status WHERE event_id = %s",
                event.event_id) == ("applied",)
    assert _one(db, "SELECT status FROM dead_letter_queue WHERE id = %s", dlq_id) == \
        ("replayed",)

    # The audit page names who replayed it, and the forged attempt.
    driver.get(console.url + "/audit")
    audit = _rows(driver, "audit")
    replays = [r for r in audit if r[2:4] == ["dlq_replay", f"dead letter {dlq_id}"]]
    assert [r[1] for r in replays] == [_actor(console)] and replays[0][4] == "done"
    assert OPERATOR in replays[0][1] and replays[0][5].startswith("replayed")
    assert [r[4] for r in audit if r[2:4] == ["csrf_refused",
                                              f"/dead-letters/{dlq_id}/replay"]] == ["refused"]


def test_hostile_bodies_render_as_inert_text(operator: WebDriver, console: ConsoleServer,
                                             hostile: Hostile, recorder: Recorder,
                                             shots: Screenshots) -> None:
    driver = operator
    # The recorder does see this browser's requests: silence below means something.
    driver.get(recorder.url + "/control")
    assert recorder.seen() == ["GET /control"]
    security_messages(driver)  # drained: only the hostile pages' count below
    pages = {
        "dead letter": f"/dead-letters/{hostile.dlq_id}",
        "event": f"/events/{quote(hostile.event_id, safe='')}",
        "dead-letter list": "/dead-letters?" + urlencode({"reason": hostile.reason}),
    }
    shown_json = json.dumps(hostile.markup, ensure_ascii=False)  # as a JSON body shows it
    for name, path in pages.items():
        driver.get(console.url + path)
        _assert_no_alert(driver)
        assert driver.find_element(By.TAG_NAME, "h1").text, name  # the page, rendered
        assert driver.find_elements(By.TAG_NAME, "script") == [], name
        assert driver.find_elements(By.CSS_SELECTOR, "main img, main svg, main [onerror],"
                                                     " main [onload]") == [], name
        if name == "dead letter":
            # Every value shown as the very text that was stored.
            assert _content(driver, "payload") == hostile.markup
            assert _text(driver, "cause") == hostile.markup
            assert "<script>alert(1)</script>" in _text(driver, "payload")  # visible
            assert shown_json in _content(driver, "stored")
            shots.take(driver, "dead-letter-hostile")
        elif name == "event":
            assert shown_json in _content(driver, "body")
            assert "<script>alert(1)</script>" in _text(driver, "body")  # visible
        else:
            assert driver.find_element(By.CSS_SELECTOR, f'#dead-letters a[href='
                                       f'"/dead-letters/{hostile.dlq_id}"]')
            assert hostile.reason in driver.find_element(By.ID, "dead-letters").text
    # Nothing on these pages even tried to run or load (the CSP never had to block),
    # and nothing reached the recorder.
    assert security_messages(driver) == []
    assert recorder.quiet_for(1.0, since=1) == []


def test_a_post_without_the_token_or_from_another_origin_is_refused(
        operator: WebDriver, console: ConsoleServer, hostile: Hostile,
        db: Connection) -> None:
    token = _session_token(operator)
    before = _last_action(db)
    # Without the form's token: refused before anything runs, and recorded.
    refused = _post(console, "/ledger/reconcile", token, {"run": "now"})
    assert refused.status_code == 403, refused.text[:300]
    assert _actions(db, _actor(console), before) == [
        ("csrf_refused", "/ledger/reconcile", "refused")]  # no reconcile ran

    # With the right token but from another site's page: the Origin alone refuses it.
    operator.get(console.url + "/ledger")
    csrf = operator.find_element(By.CSS_SELECTOR, "form[action='/ledger/reconcile']"
                                                  " input[name=csrf]").get_attribute("value")
    assert csrf
    before = _last_action(db)
    path = f"/dead-letters/{hostile.dlq_id}/replay"
    foreign = _post(console, path, token, {"csrf": csrf}, origin="http://evil.example")
    assert foreign.status_code == 403 and "another origin" in foreign.text
    assert _actions(db, _actor(console), before) == []  # it never reached the console
    # The same POST from the console's own origin does reach it (and the replay is
    # refused: that dead letter's payload is no event).
    same = _post(console, path, token, {"csrf": csrf}, origin=console.url)
    assert same.status_code == 409, same.text[:300]
    assert _actions(db, _actor(console), before) == [
        ("dlq_replay", f"dead letter {hostile.dlq_id}", "refused")]
    assert _one(db, "SELECT status FROM dead_letter_queue WHERE id = %s",
                hostile.dlq_id) == ("open",)


def test_a_wrong_key_is_refused(browser: WebDriver, console: ConsoleServer, db: Connection,
                                shots: Screenshots) -> None:
    wrong = "pck_" + "W" * 43
    before = _last_action(db)
    assert _submit_login(browser, console, wrong) == "/login"
    assert _text(browser, "error") == "that key does not open the console"
    assert browser.find_elements(By.TAG_NAME, "nav") == []
    shots.take(browser, "login-refused")
    # Over HTTP: 401, and no session cookie.
    http = requests.Session()
    form = http.get(console.url + "/login", timeout=10)
    login_csrf = form.cookies.get("paystream_console_login")
    answer = http.post(console.url + "/login", data={"key": wrong, "login_csrf": login_csrf},
                       allow_redirects=False, timeout=10)
    assert answer.status_code == 401 and SESSION_COOKIE not in answer.cookies
    with db.cursor() as cur:
        cur.execute("SELECT actor, target, result FROM operator_actions WHERE id > %s"
                    " AND action = 'login' AND target = 'pck_WWWW...'", (before,))
        assert cur.fetchall() == [("anonymous", "pck_WWWW...", "refused")] * 2


def test_an_expired_session_sends_the_browser_back_to_login(
        operator: WebDriver, console: ConsoleServer, db: Connection) -> None:
    token = _session_token(operator)
    with db.cursor() as cur:
        cur.execute("UPDATE console_sessions SET expires_at = now() - interval '1 second'"
                    " WHERE session_hash = %s", (hashlib.sha256(token.encode()).hexdigest(),))
        assert cur.rowcount == 1
    operator.get(console.url + "/dead-letters")
    assert _path(operator) == "/login"
    assert operator.find_elements(By.ID, "key") and \
        operator.find_elements(By.ID, "dead-letters") == []
    assert operator.get_cookie(SESSION_COOKIE) is not None  # the cookie alone opens nothing


def test_the_ingest_public_port_never_serves_the_console(
        operator: WebDriver, console: ConsoleServer) -> None:
    token = _session_token(operator)
    with ingest_server() as ingest:
        for base in (ingest.url, ingest.admin_url):
            for path in ("/login", "/search", "/dead-letters", "/audit", "/"):
                answer = requests.get(base + path, cookies={SESSION_COOKIE: token},
                                      allow_redirects=False, timeout=10)
                assert answer.status_code == 404, (base, path, answer.status_code)
            logging_in = requests.post(base + "/login", data={"key": console.key},
                                       allow_redirects=False, timeout=10)
            assert logging_in.status_code == 404 and "set-cookie" not in logging_in.headers
        operator.get(ingest.url + "/dead-letters")
        assert operator.find_elements(By.ID, "dead-letters") == []
        assert operator.find_elements(By.ID, "key") == []


def test_the_console_listens_on_the_loopback_only(console: ConsoleServer) -> None:
    address = _outward_address()
    if address is None:
        why = "this host has no address but the loopback: nothing to refuse on"
        if in_ci():
            pytest.fail(why)  # a skipped check proves nothing; CI hosts have a route
        pytest.skip(why)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((address, console.port), timeout=5).close()
    socket.create_connection(("127.0.0.1", console.port), timeout=5).close()


def _failed_notification(db: Connection, event: PaymentEvent) -> str:
    """The poison event's deposit.credited intent, as the notifier records one, with a
    delivery that failed once (500) to an endpoint of its own, disabled: what the
    notification page shows. No notifier group runs in this module."""
    intent = intent_id(event.event_id, IntentType.DEPOSIT_CREDITED)
    with db.cursor() as cur:
        endpoint, _ = endpoints.add(cur, "http://127.0.0.1:9/console-shot", None, [],
                                     guard=LOOPBACK_GUARD)
        endpoints.disable(cur, endpoint, "a browser test's endpoint")
        cur.execute("INSERT INTO notification_intents (intent_id, type, user_id, created_at,"
                    " data, trace_id) VALUES (%s, %s, %s, now(), %s, %s)"
                    " ON CONFLICT DO NOTHING",
                    (intent, IntentType.DEPOSIT_CREDITED.value, event.user_id,
                     json.dumps({"event_id": event.event_id, "user_id": event.user_id,
                                 "asset": event.asset, "amount": str(event.amount)}),
                     "trace-" + event.event_id))
        cur.execute("INSERT INTO notification_deliveries (intent_id, endpoint_id, state,"
                    " attempts, last_status, last_error) VALUES (%s, %s, 'failed', 1, 500,"
                    " 'HTTP 500')", (intent, endpoint))
        cur.execute("INSERT INTO notification_attempts (intent_id, endpoint_id, attempt,"
                    " started_at, latency_s, status_code, error) VALUES"
                    " (%s, %s, 1, now(), 0.042, 500, 'HTTP 500')", (intent, endpoint))
    return intent


def test_the_main_pages_are_screenshot(operator: WebDriver, console: ConsoleServer,
                                       poison: Poison, hostile: Hostile, shots: Screenshots,
                                       db: Connection) -> None:
    intent = _failed_notification(db, poison.event)
    # the bulk replay's confirm step for the hostile dead letter's reason: open, and the
    # only one of its reason (the poison's is replayed by now)
    names = {"user": quote(poison.event.user_id, safe=""),
             "event": quote(poison.event.event_id, safe=""), "dlq": str(poison.dlq_id),
             "reason": quote(hostile.reason, safe=""), "intent": intent}
    for name, path, heading in MAIN_PAGES:
        operator.get(console.url + path.format(**names))
        assert operator.find_elements(By.ID, "error") == [], (name, _text(operator, "error"))
        title = operator.find_element(By.TAG_NAME, "h1").text
        assert title.startswith(heading.format(user=poison.event.user_id,
                                               event=poison.event.event_id,
                                               dlq=poison.dlq_id, intent=intent)), \
            (name, title)
        if name == "dead-letters-bulk":  # a count to confirm, not an empty match
            assert _text(operator, "bulk-count").startswith("1 dead letter(s) will be"), \
                _text(operator, "bulk-count")
        if name == "notification":  # the attempt with its response code
            assert "500" in operator.find_element(By.ID, "attempts").text
        if name == "search":
            assert operator.find_element(
                By.CSS_SELECTOR, f'#events a[href="/events/{names["event"]}"]')
        written = shots.take(operator, name)
        assert png_size(written) == (WIDTH, HEIGHT)
    assert {p.name for p in shots.written} >= {f"{n}.png" for n, _, _ in MAIN_PAGES}


def _outward_address() -> str | None:
    """This host's address on its default route (no packet is sent), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address
