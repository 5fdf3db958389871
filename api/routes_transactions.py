"""GET /v1/users/{user_id}/transactions: a user's transfers, newest first, by cursor."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from paystream.api import models, reads
from paystream.api.auth import TransactionsRead
from paystream.api.settings import MAX_LIMIT
from paystream.edge.errors import NotFoundError
from paystream.schema import users
from paystream.schema.db import Cursor

router = APIRouter()


@router.get("/v1/users/{user_id}/transactions", response_model=models.Transactions,
            responses=models.ERRORS, summary="a user's transfers, newest first, by cursor")
async def get_transactions(user_id: models.UserId, access: TransactionsRead,
                           cursor: Annotated[str | None, Query(max_length=19)] = None,
                           limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50
                           ) -> dict[str, Any]:
    before = reads.parse_cursor(cursor)

    def work(cur: Cursor) -> tuple[list[dict[str, Any]], str | None]:
        items, next_cursor = reads.transactions(cur, user_id, before, limit)
        if not items and not users.exists(cur, user_id):
            raise NotFoundError(f"no user {user_id!r}", code="unknown_user")
        return items, next_cursor

    items, next_cursor = await access.read(work)
    return {"items": items, "next_cursor": next_cursor}
