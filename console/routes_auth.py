"""Logging in with a console key, and out. A login form carries a token of its own (a
cookie and a hidden field that must match), so another site cannot log a browser in."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request
from fastapi.responses import Response

from paystream.console_kit import access, audit
from paystream.console_kit.web import (
    LOGIN_CSRF_COOKIE,
    SESSION_COOKIE,
    Operator,
    Posted,
    console_of,
    read_form,
    redirect,
    render,
)
from paystream.edge.errors import RateLimitError
from paystream.schema.db import Cursor

router = APIRouter()


def _cookie(response: Response, request: Request, name: str, value: str,
            max_age: int | None) -> None:
    response.set_cookie(name, value, max_age=max_age, path="/", httponly=True,
                        samesite="strict", secure=console_of(request).settings.secure_cookie)


def _login_page(request: Request, status: int = 200, error: str = "") -> Response:
    token = secrets.token_urlsafe(32)
    response = render(request, "login.html", status, login_csrf=token, error=error)
    _cookie(response, request, LOGIN_CSRF_COOKIE, token, 600)
    return response


@router.get("/login")
async def login_form(request: Request) -> Response:
    return _login_page(request)


@router.post("/login")
async def login(request: Request) -> Response:
    console = console_of(request)
    fields = await read_form(request)
    expected = request.cookies.get(LOGIN_CSRF_COOKIE)
    if not expected or fields.get("login_csrf") != expected:
        return _login_page(request, 403, "the login form expired: try again")
    client = request.client.host if request.client else "unknown"
    try:
        console.failed_logins.require(client)
    except RateLimitError as exc:
        response = _login_page(request, 429, "too many failed logins from this address: "
                                             f"try again in {exc.retry_after} s")
        response.headers["retry-after"] = str(exc.retry_after)
        return response
    key = fields.get("key", "").strip()
    opened = await console.db.write(lambda cur: access.login(
        cur, key, console.settings.session_ttl_s))
    if opened is None:
        console.failed_logins.spend(client)
        shown = key[:8] + "..." if key.startswith(access.KEY_PREFIX) else "(not a key)"
        await console.db.write(lambda cur: audit.record(
            cur, "anonymous", "login", shown, "refused", "a wrong, revoked or malformed key"))
        return _login_page(request, 401, "that key does not open the console")
    session, token = opened
    await console.db.write(lambda cur: audit.record(cur, session.actor, "login",
                                                    session.key_id, "done"))
    response = redirect("/search")
    _cookie(response, request, SESSION_COOKIE, token,
            int(console.settings.session_ttl_s))
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/")
    return response


@router.post("/logout")
async def logout(request: Request, form: Posted) -> Response:
    token = request.cookies.get(SESSION_COOKIE, "")
    def end(cur: Cursor) -> None:
        access.logout(cur, token)
        audit.record(cur, form.session.actor, "logout", form.session.key_id, "done")

    await console_of(request).db.write(end)
    response = redirect("/login")
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.get("/")
async def home(_: Operator) -> Response:
    return redirect("/search")
