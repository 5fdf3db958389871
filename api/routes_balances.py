"""GET /v1/users/{user_id}/balances: a user's balances, now or at a moment."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query

from paystream.api import models, reads
from paystream.api.auth import BalancesRead
from paystream.edge.errors import InvalidRequestError, NotFoundError
from paystream.schema import balances as books
from paystream.schema import users
from paystream.schema.db import Cursor

router = APIRouter()


@router.get("/v1/users/{user_id}/balances", response_model=models.Balances,
            responses=models.ERRORS, summary="a user's balances, now or at a moment")
async def get_balances(user_id: models.UserId, access: BalancesRead,
                       at: Annotated[datetime | None, Query(
                           description="ISO 8601; the balances at that moment, from"
                                       " the postings (UTC when no offset is given)")
                       ] = None) -> dict[str, Any]:
    moment = utc_moment(at)
    if moment is None:  # now: the key, the user and the rows in one statement
        exists, answers = await access.read_with_key(
            lambda cur, key: reads.balances_with_key(cur, key, user_id))
    else:
        def at_moment(cur: Cursor) -> tuple[bool, list[dict[str, str]]]:
            rows = books.read(cur, user_id, moment)
            # A user's accounts exist only for a user: asked only when there are none.
            return (bool(rows) or users.exists(cur, user_id)), reads.balance_answers(rows)

        exists, answers = await access.read(at_moment)
    if not exists:
        raise NotFoundError(f"no user {user_id!r}", code="unknown_user")
    return {"user_id": user_id, "at": at, "balances": answers}


def utc_moment(at: datetime | None) -> str | None:
    """?at= as Postgres reads it, in UTC (a moment without an offset is UTC): Postgres
    refuses offsets beyond 15:59 that ISO 8601 allows, and a refused one was a 500."""
    if at is None:
        return None
    try:
        return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).astimezone(
            UTC).isoformat()
    except OverflowError:  # before year 1 in UTC
        raise InvalidRequestError("at is out of range", code="invalid_request") from None
