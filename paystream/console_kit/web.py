"""What every console page is served with, whichever feature's folder its route lives in:
the app's state, the templates (Jinja2, every value HTML-escaped: stored bodies are
written by whoever sent them), the security headers and host check on every answer,
and the two dependencies a route takes: the logged-in operator (`Operator`), or the
operator and a POST's form, its CSRF token checked (`Posted`); an action with its record
(`act`) and a page (`render`).

No page runs script: the Content-Security-Policy allows no script at all (`default-src
'none'`), styles only from the console itself, no frames, forms only to itself."""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import parse_qsl, quote

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import (
    ChoiceLoader,
    Environment,
    PackageLoader,
    StrictUndefined,
    select_autoescape,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paystream.console_kit import access
from paystream.console_kit.database import ConsoleDatabase
from paystream.console_kit.settings import ConsoleSettings
from paystream.edge.params import form_refusal, url_refusal
from paystream.rate_limit import TokenBuckets
from paystream.schema.amounts import format_amount
from paystream.schema.db import Cursor
from paystream.schema.transfers import signed

SESSION_COOKIE = "paystream_console"
LOGIN_CSRF_COOKIE = "paystream_console_login"
MAX_FORM_BYTES = 64 * 1024
CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),  # no-referrer makes Chrome post Origin: null
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
KIT = "paystream.console_kit"  # its templates/: base.html, every page's frame; error.html


@dataclass(frozen=True)
class Console:
    """What the routes read from `request.app.state.console`."""

    settings: ConsoleSettings
    db: ConsoleDatabase
    templates: Environment
    # Failed logins per client address (the socket's peer, or what a trusted proxy says):
    # a few, then 429 until the bucket refills (settings.login_failure_burst, ...).
    failed_logins: TokenBuckets


class DuplicateTemplateError(ValueError):
    """Two folders hold a template of one name: which one a page gets would depend on
    the order the folders are searched in."""


def templates(packages: Sequence[str]) -> Environment:
    """The templates of the kit and of `packages` (each one's templates/ folder), found
    by name in one environment; DuplicateTemplateError if a name is in two of them."""
    loaders = [PackageLoader(package, "templates") for package in (KIT, *packages)]
    where: dict[str, str] = {}
    for package, loader in zip((KIT, *packages), loaders, strict=True):
        for name in loader.list_templates():
            if name in where:
                raise DuplicateTemplateError(f"template {name!r} is in {where[name]}'s templates/"
                                    f" and in {package}'s")
            where[name] = package
    env = Environment(loader=ChoiceLoader(loaders),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["amount"] = lambda value: "" if value is None else format_amount(value)
    env.filters["signed"] = lambda value: "" if value is None else signed(value)
    env.filters["at"] = lambda value: "" if value is None else value.isoformat(
        sep=" ", timespec="seconds")
    env.filters["q"] = lambda value: quote(str(value), safe="")
    return env


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


class LoginRequired(Exception):  # noqa: N818 - a condition, answered by a redirect
    """No live session: the operator logs in first."""


class Refused(Exception):  # noqa: N818 - a refusal, answered with its status and reason
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Form:
    session: access.Session
    fields: dict[str, str]

    def get(self, name: str, default: str = "") -> str:
        return self.fields.get(name, default)


async def _operator(request: Request) -> access.Session:
    token = request.cookies.get(SESSION_COOKIE)
    if token is None:
        raise LoginRequired
    session = await console_of(request).db.read(lambda cur: access.session_of(cur, token))
    if session is None:
        raise LoginRequired
    request.state.session = session
    request.state.csrf = access.csrf_token(token)
    return session


async def read_form(request: Request) -> dict[str, str]:
    """A urlencoded form body, at most MAX_FORM_BYTES, UTF-8 and without control
    characters (edge/params.py); a field sent twice keeps its first."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Refused(415, "a form is sent as application/x-www-form-urlencoded")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise Refused(413, f"a form is at most {MAX_FORM_BYTES} bytes")
    try:  # strict: a percent-escape that is not UTF-8 is refused, not replaced
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False,
                          max_num_fields=100, errors="strict")
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refused(400, f"an unreadable form: {type(exc).__name__}") from None
    fields: dict[str, str] = {}
    for name, value in pairs:
        fields.setdefault(name, value)
    refusal = form_refusal(fields)
    if refusal is not None:
        raise Refused(400, refusal)
    return fields


async def _posted(request: Request) -> Form:
    """The operator and the form of a POST whose CSRF token is this session's; a POST
    without it (or with another session's) is refused 403 and recorded."""
    session = await _operator(request)
    fields = await read_form(request)
    token = request.cookies.get(SESSION_COOKIE, "")
    if not access.csrf_matches(token, fields.get("csrf")):
        from paystream.console_kit import audit

        await console_of(request).db.write(lambda cur: audit.record(
            cur, session.actor, "csrf_refused", request.url.path, "refused",
            "a POST without this session's CSRF token"))
        raise Refused(403, "this form's CSRF token is missing or not this session's: "
                           "reload the page and try again")
    return Form(session, fields)


Operator = Annotated[access.Session, Depends(_operator)]
Posted = Annotated[Form, Depends(_posted)]


@dataclass(frozen=True)
class Acted:
    done: bool
    message: str  # what was done, or "refused: why"


async def act(request: Request, form: Form, action: str, target: str,
              work: Callable[[Cursor], str], refusals: tuple[type[Exception], ...]) -> Acted:
    """An operator action: `work(cur)` (returning what it did) and its record in
    operator_actions in ONE transaction; a refusal (one of `refusals`, raised by work)
    rolls the work back and is recorded on its own."""
    from paystream.console_kit import audit

    db = console_of(request).db

    def done(cur: Cursor) -> str:
        said = work(cur)
        audit.record(cur, form.session.actor, action, target, "done", said)
        return said

    try:
        return Acted(True, await db.write(done))
    except refusals as exc:
        why = str(exc)
    await db.write(lambda cur: audit.record(cur, form.session.actor, action, target,
                                            "refused", why))
    return Acted(False, f"refused: {why}")


def render(request: Request, template: str, http_status: int = 200, /, **context: Any
           ) -> HTMLResponse:
    page = console_of(request).templates.get_template(template).render(
        path=request.url.path, session=getattr(request.state, "session", None),
        csrf=getattr(request.state, "csrf", ""), **context)
    return HTMLResponse(page, status_code=http_status)


def redirect(to: str) -> Response:
    return RedirectResponse(to, status_code=303)


def same_origin(request_host: str | None, origin: str) -> bool:
    """Whether an Origin header names the host the request was addressed to."""
    if request_host is None:
        return False
    return any(hmac.compare_digest(origin, f"{scheme}://{request_host}")
               for scheme in ("http", "https"))


# RFC 9110's Host: a reg-name or an IP literal, then an optional port; nothing else
# (no user info, no path: "localhost:1@evil.example" names no host of ours).
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::([0-9]{1,5}))?")


def host_name(host: str | None) -> str | None:
    """The lower-cased name of a Host header (an IPv6 literal keeps its brackets), or
    None when the header is missing or is not a host and an optional port."""
    found = _HOST.fullmatch(host or "")
    if found is None or (found.group(2) is not None and int(found.group(2)) > 65535):
        return None
    return found.group(1).lower()


class Guard:
    """The outermost layer: a Host that is not a host name and a port, or names a host
    not allowed, is refused 400 (DNS rebinding); so is a URL whose values are not UTF-8
    or hold a control character (edge/params.py); a POST from another origin 403; every
    answer gets SECURITY_HEADERS."""

    def __init__(self, app: ASGIApp, allowed_hosts: tuple[str, ...]) -> None:
        self.app = app
        self._allowed = {h.lower() for h in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in reversed(scope.get("headers", []))}
        host = headers.get("host")
        name = host_name(host)
        if name is None:
            await _plain(send, 400, "the Host header is a host name and an optional port,"
                                    " nothing else")
            return
        if name not in self._allowed:
            await _plain(send, 400, "this console does not answer to that host name")
            return
        refusal = url_refusal(scope.get("raw_path") or scope.get("path", "").encode(),
                              scope.get("query_string", b""))
        if refusal is not None:
            await _plain(send, 400, f"a bad request: {refusal}")
            return
        if scope.get("method") == "POST":
            origin = headers.get("origin")
            fetch_site = headers.get("sec-fetch-site")
            if (origin is not None and origin != "null" and not same_origin(host, origin)) \
                    or fetch_site in ("cross-site", "same-site") or origin == "null":
                await _plain(send, 403, "a POST from another origin is refused")
                return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                  *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, with_headers)


async def _plain(send: Send, status: int, text: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            *SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": text.encode()})
