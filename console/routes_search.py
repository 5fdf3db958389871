"""Search, an event's story, a user's page."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from paystream.api.reads import parse_cursor, transactions
from paystream.console import search, story
from paystream.console_kit.web import Operator, Refused, console_of, render
from paystream.consumers.ledger.shortfalls import list_shortfalls
from paystream.edge.errors import InvalidRequestError
from paystream.edge.params import PrintableIdPath, UserIdPath, text_query
from paystream.schema import balances
from paystream.schema.db import Cursor
from paystream.schema.holds import open_holds

router = APIRouter()
HISTORY_PAGE = 50


@router.get("/search")
async def search_page(request: Request, _: Operator,
                      q: Annotated[str, text_query(search.MAX_QUERY)] = "") -> Response:
    found = await console_of(request).db.read(lambda cur: search.find(cur, q))
    return render(request, "search.html", found=found)


@router.get("/events/{event_id:path}")
async def event_page(request: Request, _: Operator, event_id: PrintableIdPath) -> Response:
    told = await console_of(request).db.read(lambda cur: story.story(cur, event_id))
    if told is None:
        raise Refused(404, "no stored event with that id (a refused delivery is not "
                           "stored: `paystream refusals list`)")
    return render(request, "event.html", story=told)


@router.get("/users/{user_id}")
async def user_page(request: Request, _: Operator, user_id: UserIdPath,
                    before: Annotated[str | None, text_query(40)] = None) -> Response:
    try:
        cursor = parse_cursor(before)
    except InvalidRequestError:
        raise Refused(400, "not a page cursor") from None

    def read(cur: Cursor) -> dict[str, Any] | None:
        cur.execute("SELECT created_at FROM users WHERE user_id = %s", (user_id,))
        row = cur.fetchone()
        if row is None:
            return None
        page, next_cursor = transactions(cur, user_id, cursor, HISTORY_PAGE)
        cur.execute("SELECT event_id, event_type, asset, amount, status, received_at"
                    " FROM payment_events JOIN event_status USING (event_id)"
                    " WHERE user_id = %s ORDER BY received_at DESC LIMIT 20", (user_id,))
        recent = cur.fetchall()
        return {"created_at": row[0], "balances": balances.read(cur, user_id),
                "history": page, "next": next_cursor,
                "holds": open_holds(cur, user_id),
                "shortfalls": list_shortfalls(cur, include_resolved=True, user_id=user_id),
                "recent": recent}

    seen = await console_of(request).db.read(read)
    if seen is None:
        raise Refused(404, "no such user")
    return render(request, "user.html", user_id=user_id, **seen)
