"""The console's rules that need no database: the host and origin guard, the CSRF token
of a session, the dead-letter filters, and that every template escapes what it shows."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from datetime import UTC, datetime
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from jinja2 import meta

from paystream.console.app import NAV, templates
from paystream.console.story import Story
from paystream.console_kit import access
from paystream.console_kit.web import Guard, Refused
from paystream.consumers.dead_letters.console_routes import _filter
from paystream.stack.alerts import Alert, Silence

HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'


def _call(guard: Guard, method: str, headers: dict[str, str]) -> int:
    """The status the guard (or the app behind it, which answers 204) gives a request."""
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": "/",
             "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}
    asyncio.run(Guard(app, ("127.0.0.1", "localhost"))(scope, receive, send)
                if guard is None else guard(scope, receive, send))
    start = sent[0]
    header_names = {k for k, _ in start["headers"]}
    assert b"content-security-policy" in header_names  # on refusals too
    return int(start["status"])


@pytest.mark.parametrize(("method", "headers", "status"), [
    ("GET", {"host": "127.0.0.1:8102"}, 204),
    ("GET", {"host": "localhost"}, 204),
    ("GET", {"host": "evil.example:8102"}, 400),  # DNS rebinding
    ("GET", {}, 400),
    ("POST", {"host": "127.0.0.1:8102", "origin": "http://127.0.0.1:8102"}, 204),
    ("POST", {"host": "127.0.0.1:8102"}, 204),  # no Origin: the CSRF token decides
    ("POST", {"host": "127.0.0.1:8102", "origin": "http://evil.example"}, 403),
    ("POST", {"host": "127.0.0.1:8102", "origin": "http://127.0.0.1:9999"}, 403),
    ("POST", {"host": "127.0.0.1:8102", "origin": "null"}, 403),
    ("POST", {"host": "127.0.0.1:8102", "sec-fetch-site": "cross-site"}, 403),
])
def test_the_guard_refuses_other_hosts_and_foreign_posts(method: str, headers: dict[str, str],
                                                        status: int) -> None:
    assert _call(None, method, headers) == status  # type: ignore[arg-type]


def test_a_sessions_csrf_token_is_an_hmac_of_its_token_and_no_other_sessions() -> None:
    token, other = "a" * 43, "b" * 43
    expected = hmac.new(token.encode(), b"paystream-console-csrf", hashlib.sha256).hexdigest()
    assert access.csrf_token(token) == expected
    assert access.csrf_matches(token, expected)
    assert not access.csrf_matches(other, expected)
    assert not access.csrf_matches(token, None) and not access.csrf_matches(token, "")


def test_keys_and_tokens_are_recognised_by_shape_before_any_lookup() -> None:
    assert access.KEY_PATTERN.fullmatch("pck_" + "x" * 43)
    assert not access.KEY_PATTERN.fullmatch("psk_" + "x" * 43)  # a merchant API key
    assert not access.TOKEN_PATTERN.fullmatch("' OR 1=1 --" + "x" * 32)


def test_the_dead_letter_filters_accept_only_what_the_page_offers() -> None:
    assert _filter("open", " schema ", "", "24h").newer_than_s == 86400.0
    older = _filter("all", "", "payments", "older:7d")
    assert (older.status, older.provider, older.older_than_s) == (None, "payments", 604800.0)
    for bad in (("opened", "", "", ""), ("open", "", "", "3d"), ("open", "", "", "older:")):
        with pytest.raises(Refused):
            _filter(*bad)


def _value(name: str) -> Any:
    """A hostile value for every name a template reads, shaped as the routes pass it."""
    at = datetime(2026, 12, 5, tzinfo=UTC)
    row = SimpleNamespace(**{k: HOSTILE for k in (
        "event_id", "user_id", "provider", "event_type", "asset", "status", "found_as",
        "intent_id", "endpoint_id", "type", "state", "last_error", "url", "disabled_reason",
        "source_event_id", "resolution", "actor", "action", "target", "result", "detail",
        "component", "check", "value", "threshold", "verdict", "name", "hold_id", "key_id",
        "merchant_id")},
        amount=Decimal("1"), fee=Decimal("0"), balance=Decimal("1"), pending=Decimal("0"),
        held=Decimal("0"), received_at=at, created_at=at, at=at, delivered_at=None,
        failing_since=None, disabled_at=at, resolved_at=None, deleted_at=None, attempts=1,
        last_status=500, id=1, event_types=[HOSTILE])
    row.state = SimpleNamespace(value=HOSTILE) if name == "holds" else HOSTILE
    story = Story({"event_id": HOSTILE, "provider": HOSTILE, "event_type": HOSTILE,
                   "user_id": HOSTILE, "asset": HOSTILE, "amount": Decimal(1),
                   "status": HOSTILE, "content_hash": HOSTILE, "trace_id": HOSTILE,
                   "received_at": at, "status_changed_at": at}, HOSTILE,
                  timeline=[(at, HOSTILE)], outcomes=[(HOSTILE, HOSTILE, at)])
    dead = {"id": 1, "status": "open", "discard_reason": HOSTILE, "error_reason": HOSTILE,
            "error_detail": HOSTILE, "event_id": HOSTILE, "source_topic": HOSTILE,
            "source_partition": 0, "source_offset": 0, "message_key": HOSTILE,
            "first_seen_at": at, "last_seen_at": at, "payload": HOSTILE,
            "headers_text": HOSTILE, "attempts_text": HOSTILE}
    statement = SimpleNamespace(statement_id=1, provider=HOSTILE, file_name=HOSTILE,
                                line_count=1, period_start=at, period_end=at, imported_at=at,
                                imported_by=HOSTILE, unresolved=1)
    values: dict[str, Any] = {
        "found": SimpleNamespace(query=HOSTILE, empty=False, users=[HOSTILE],
                                 addresses=[(HOSTILE, HOSTILE, HOSTILE)], dead_letters=[1],
                                 intents=[HOSTILE], events=[row]),
        "story": story, "dead": dead, "stored": {"status": HOSTILE, "provider": HOSTILE,
                                                "body": HOSTILE},
        "rows": [{**dead}], "slots": [row], "endpoints": [row], "actions": [row],
        "shortfalls": [row], "holds": [(row, at)], "balances": [row], "results": [row],
        "history": [{"transfer_id": 1, "event_id": HOSTILE, "event_type": HOSTILE,
                     "created_at": at, "entries": [{"book": HOSTILE, "delta": HOSTILE,
                                                    "asset": HOSTILE}]}],
        "recent": [(HOSTILE, HOSTILE, HOSTILE, Decimal(1), HOSTILE, at)],
        "attempts": [(HOSTILE, 1, at, 0.5, 500, HOSTILE)],
        "intent": {"id": HOSTILE, "type": HOSTILE, "user_id": HOSTILE, "created_at": at,
                   "data": {"event_id": HOSTILE}},
        "open_reasons": [(HOSTILE, 1)], "statuses": ("open",), "states": ("failed",),
        "ages": {"": None, "1h": 3600.0}, "result": {"replayed": [], "refused": [(1, HOSTILE)]},
        "last_reconcile": row, "count": 1, "capped": False, "limit": 1, "more": None,
        "next": None, "refresh_s": 15, "overall": HOSTILE, "created_at": at,
        # Alertmanager's labels and annotations are whatever the rules (or a sender
        # posting to its API) put there.
        "alerts": [Alert(HOSTILE, {"severity": HOSTILE, "group": HOSTILE}, "active",
                         HOSTILE, HOSTILE, HOSTILE, (), (HOSTILE,))],
        "silences": [Silence(HOSTILE, "active", HOSTILE, HOSTILE, HOSTILE, HOSTILE,
                             HOSTILE)],
        "durations": (HOSTILE,),
        # The statement pages: a provider's file, its lines and their results.
        "statements": [statement], "statement": statement, "counts": {HOSTILE: 1},
        "payouts": [SimpleNamespace(payout_id=HOSTILE, paid=Decimal(-1), settled=Decimal(1),
                                    lines=1, sums=False)],
        "lines": [SimpleNamespace(
            line_no=2, line_id=HOSTILE, type=HOSTILE, amount=Decimal(-1), fee=Decimal(0),
            currency=HOSTILE, event_id=HOSTILE, event_type=HOSTILE, event_amount=Decimal(1),
            user_id=HOSTILE, result=HOSTILE, detail=HOSTILE, state="proposed",
            action=HOSTILE, decision_id=1, key=1, match_id=1)],
        "page": 1,
        # Merchants and their keys (names are the operator's words, scopes the key's).
        "merchants": [SimpleNamespace(merchant_id=HOSTILE, name=HOSTILE, users=1)],
        "keys": [SimpleNamespace(key_id=HOSTILE, merchant_id=HOSTILE, name=HOSTILE,
                                 scopes=[HOSTILE], created_at=at, expires_at=at,
                                 last_used_at=None, revoked_at=None)],
    }
    return values.get(name, HOSTILE)


@pytest.mark.parametrize("name", sorted(t for t in templates().list_templates()
                                        if t != "base.html"))
def test_every_template_shows_hostile_values_as_text(name: str) -> None:
    env = templates()
    source = env.loader.get_source(env, name)[0]  # type: ignore[union-attr]
    wanted = meta.find_undeclared_variables(env.parse(source)) | {"message"}
    context = {v: _value(v) for v in wanted}
    context.update(nav=NAV, path="/search", csrf="t",
                   session=SimpleNamespace(name=HOSTILE))
    page = env.get_template(name).render(**context)
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;" in page  # the value is there, as text
