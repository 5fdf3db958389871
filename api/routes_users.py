"""Users and their deposit addresses: POST /v1/users, POST and GET
/v1/users/{user_id}/deposit-addresses (the rules are schema/users.py's; a
`scan_from_block` asks the chain scanner for the address's past: schema/scan_backfills.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from paystream.api import models
from paystream.api.auth import UsersRead, UsersWrite
from paystream.api.keys import Caller
from paystream.api.settings import MAX_LIMIT
from paystream.edge.errors import ConflictError, InvalidRequestError, NotFoundError
from paystream.schema import scan_backfills, users
from paystream.schema.db import Cursor
from paystream.schema.merchants import DEFAULT_MERCHANT

router = APIRouter()
USER_ERROR_STATUS = {"unknown_user": NotFoundError, "unknown_merchant": NotFoundError,
                     "address_taken": ConflictError, "user_id_taken": ConflictError}


@router.post("/v1/users", response_model=models.User, status_code=201,
             responses={**models.ERRORS, 200: {"model": models.User,
                                               "description": "the user existed already"}},
             summary="create a user")
async def post_user(body: models.NewUser, access: UsersWrite) -> JSONResponse:
    def work(cur: Cursor, caller: Caller) -> tuple[str, bool]:
        # A merchant's key makes its merchant's users; an operator's names the merchant.
        merchant = caller.merchant_id or body.merchant_id or DEFAULT_MERCHANT
        if caller.merchant_id is not None and body.merchant_id not in (None, merchant):
            raise NotFoundError(f"no merchant {body.merchant_id!r}", code="unknown_merchant")
        return merchant, _user_rule(lambda: users.add_user(cur, body.user_id, merchant))

    merchant, created = await access.write(work)
    return JSONResponse({"user_id": body.user_id, "merchant_id": merchant,
                         "created": created},
                        status_code=201 if created else 200)


@router.post("/v1/users/{user_id}/deposit-addresses", response_model=models.AddressAdded,
             status_code=201,
             responses={**models.ERRORS, 200: {"model": models.AddressAdded,
                                               "description": "it was this user's already"}},
             summary="assign a deposit address to a user")
async def post_address(user_id: models.UserId, body: models.NewAddress,
                       access: UsersWrite) -> JSONResponse:
    def work(cur: Cursor) -> bool:
        added = users.add_address(cur, body.network, body.address, user_id)
        if body.scan_from_block is not None:
            scan_backfills.request(cur, body.network, body.address, body.scan_from_block)
        return added

    created = await access.write(lambda cur, _: _user_rule(lambda: work(cur)))
    network, address = users.normal_address(body.network, body.address)
    return JSONResponse({"network": network, "address": address, "user_id": user_id,
                         "created": created}, status_code=201 if created else 200)


@router.get("/v1/users/{user_id}/deposit-addresses", response_model=models.Addresses,
            responses=models.ERRORS, summary="a user's deposit addresses")
async def get_addresses(user_id: models.UserId, access: UsersRead,
                        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = MAX_LIMIT
                        ) -> dict[str, Any]:
    def work(cur: Cursor) -> list[users.DepositAddress]:
        if not users.exists(cur, user_id):
            raise NotFoundError(f"no user {user_id!r}", code="unknown_user")
        return users.addresses(cur, user_id, limit)

    found = await access.read(work)
    return {"user_id": user_id, "items": [
        {"network": a.network, "address": a.address, "user_id": a.user_id,
         "created_at": a.created_at} for a in found]}


def _user_rule(action: Callable[[], object]) -> bool:
    """schema/users.py's refusal as the API's: 400, or 404 / 409 by its code."""
    try:
        return bool(action())
    except users.UserError as exc:
        raise USER_ERROR_STATUS.get(exc.code, InvalidRequestError)(
            str(exc), code=exc.code) from None
