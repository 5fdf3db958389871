"""Merchants and their API keys: every key with its merchant, scopes, expiry and last
use, filtered by merchant; revoke one. The action is `paystream apikeys revoke`'s own
function (api/keys.py), with its record, in one transaction."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from fastapi.responses import Response

from paystream.api import keys
from paystream.console_kit.web import Operator, Posted, act, console_of, render
from paystream.edge.params import PrintableIdPath, text_query
from paystream.schema import merchants
from paystream.schema.db import Cursor

router = APIRouter()


async def _page(request: Request, merchant: str, message: str) -> Response:
    def read(cur: Cursor) -> tuple[list[merchants.Merchant], list[keys.ApiKey]]:
        return merchants.listed(cur), keys.listed(cur, merchant or None)

    every, rows = await console_of(request).db.read(read)
    return render(request, "keys.html", merchants=every, keys=rows, merchant=merchant,
                  message=message)


@router.get("/keys")
async def key_list(request: Request, _: Operator,
                   merchant: Annotated[str, text_query(50)] = "") -> Response:
    return await _page(request, merchant, "")


@router.post("/keys/{key_id}/revoke")
async def revoke(request: Request, form: Posted, key_id: PrintableIdPath) -> Response:
    def work(cur: Cursor) -> str:
        done = keys.revoke(cur, key_id)
        return f"key {key_id} " + ("revoked" if done else "was revoked already")

    acted = await act(request, form, "apikey_revoke", key_id, work, (keys.ApiKeyError,))
    return await _page(request, form.get("merchant").strip()[:50], acted.message)
