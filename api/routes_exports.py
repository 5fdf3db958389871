"""GET /v1/exports/postings|transfers|invoices?from=&to=: the merchant's own books as
CSV, from one snapshot (api/exports.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import IO, Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from paystream.api import exports, models
from paystream.api.auth import Access, InvoicesRead, TransactionsRead

router = APIRouter()
CHUNK = 1 << 16
From = Annotated[datetime, Query(alias="from", description="ISO 8601 with an offset;"
                                                           " rows from this moment")]
To = Annotated[datetime, Query(alias="to", description="rows before this moment (at most"
                                                       " 31 days after from)")]
CSV: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {}}, "description": "CSV with a header line"}}


async def _export(access: Access, kind: str, start: datetime, end: datetime
                  ) -> StreamingResponse:
    start, end = exports.check_range(start, end)
    spooled = await access.read(lambda cur: exports.spool(cur, kind, start, end))
    return StreamingResponse(_chunks(spooled), media_type="text/csv", headers={
        "Content-Disposition": f'attachment; filename="{kind}.csv"'})


def _chunks(spooled: IO[bytes]) -> Iterator[bytes]:
    with spooled:
        while chunk := spooled.read(CHUNK):
            yield chunk


@router.get("/v1/exports/postings", response_class=StreamingResponse,
            responses={**models.ERRORS, **CSV},
            summary="the postings to the merchant's users' books, as CSV")
async def export_postings(access: TransactionsRead, start: From, end: To
                          ) -> StreamingResponse:
    return await _export(access, "postings", start, end)


@router.get("/v1/exports/transfers", response_class=StreamingResponse,
            responses={**models.ERRORS, **CSV},
            summary="the transfers of the merchant's users' events, as CSV")
async def export_transfers(access: TransactionsRead, start: From, end: To
                           ) -> StreamingResponse:
    return await _export(access, "transfers", start, end)


@router.get("/v1/exports/invoices", response_class=StreamingResponse,
            responses={**models.ERRORS, **CSV},
            summary="the merchant's invoices, as CSV")
async def export_invoices(access: InvoicesRead, start: From, end: To) -> StreamingResponse:
    return await _export(access, "invoices", start, end)
