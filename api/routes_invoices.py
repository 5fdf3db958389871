"""Invoices: POST /v1/invoices (once per Idempotency-Key; the rules are
invoices/create.py's), GET /v1/invoices/{invoice_id}, GET /v1/invoices (pages, newest
first, by status, order id and user; invoices/reads.py) and POST
/v1/invoices/{invoice_id}/cancel."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse

from paystream.api import models, withdrawals
from paystream.api.auth import InvoicesRead, InvoicesWrite
from paystream.api.keys import Caller
from paystream.api.metrics import ApiMetrics
from paystream.api.routes_withdrawals import IDEMPOTENCY_HEADER
from paystream.api.settings import MAX_LIMIT, ApiSettings
from paystream.edge.errors import NotFoundError
from paystream.edge.observe import request_trace_id
from paystream.invoices import create, reads
from paystream.notify.intents import now_text
from paystream.notify.seal import process_sealer
from paystream.refusals import Conflict
from paystream.schema.db import Cursor

router = APIRouter()
STATUS = "^(" + "|".join(reads.STATUSES) + ")$"


@router.post("/v1/invoices", response_model=models.Invoice, status_code=201,
             responses={**models.ERRORS, 200: {
                 "model": models.Invoice,
                 "description": "the invoice this Idempotency-Key created, as it is now"}},
             summary="create an invoice (a chain asset gets a dedicated deposit address)")
async def post_invoice(request: Request, body: models.NewInvoice, access: InvoicesWrite,
                       idempotency_key: Annotated[str, Header(
                           alias=IDEMPOTENCY_HEADER, min_length=1, max_length=200,
                           description="the same key with the same body answers the"
                                       " same invoice (200); with another body 409")]
                       ) -> JSONResponse:
    settings: ApiSettings = request.app.state.settings
    metrics: ApiMetrics = request.app.state.metrics
    access.key()  # no usable key: 401 before the request's own rules are judged
    idem = withdrawals.check_idempotency_key(idempotency_key)
    wanted = create.parse_request(
        body.user_id, body.asset, body.amount, body.expires_in_s, order_id=body.order_id,
        metadata=body.metadata, tolerance_pct=body.payment_tolerance_pct,
        gateway_assets=settings.withdrawal_assets)
    trace_id = request_trace_id(request)
    try:
        status, answer, replayed = await access.write(
            lambda cur, caller: create.create(
                cur, key_id=caller.key_id, idempotency_key=idem, wanted=wanted,
                created_at_text=now_text(), sealer=process_sealer(), trace_id=trace_id))
    except Conflict as exc:
        metrics.invoices.labels(
            "no_address" if exc.code == "no_address_available" else "conflict").inc()
        raise
    metrics.invoices.labels("replayed" if replayed else "created").inc()
    return JSONResponse(models.Invoice.model_validate(answer).model_dump(mode="json"),
                        status_code=status)


@router.get("/v1/invoices/{invoice_id}", response_model=models.InvoiceDetail,
            responses=models.ERRORS,
            summary="an invoice: amounts due and paid, its payments, its status history")
async def get_invoice(invoice_id: models.PrintableId, access: InvoicesRead) -> dict[str, Any]:
    found = await access.read(lambda cur: reads.invoice(cur, invoice_id))
    if found is None:
        raise NotFoundError(f"no invoice {invoice_id[:200]!r}", code="unknown_invoice")
    return found


@router.get("/v1/invoices", response_model=models.Invoices, responses=models.ERRORS,
            summary="invoices, newest first, by cursor; filtered by status, order id, user")
async def get_invoices(
        access: InvoicesRead,
        status: Annotated[str | None, Query(
            pattern=STATUS, description="a state or an additional status")] = None,
        order_id: Annotated[str | None, Query(min_length=1,
                                              max_length=create.ORDER_ID_MAX)] = None,
        user_id: Annotated[str | None, Query(pattern=f"^{models.USER_ID}$",
                                             max_length=64)] = None,
        cursor: Annotated[str | None, Query(max_length=reads.CURSOR_MAX)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = reads.DEFAULT_LIMIT
        ) -> dict[str, Any]:
    after = reads.parse_cursor(cursor)
    order = create.check_order_id(order_id)

    def work(cur: Cursor) -> tuple[list[dict[str, Any]], str | None]:
        return reads.page(cur, status=status, order_id=order, user_id=user_id,
                          after=after, limit=limit)

    items, next_cursor = await access.read(work)
    return {"items": items, "next_cursor": next_cursor}


@router.post("/v1/invoices/{invoice_id}/cancel", response_model=models.InvoiceDetail,
             responses=models.ERRORS,
             summary="cancel an open invoice with nothing credited (it becomes invalid)")
async def cancel_invoice(request: Request, invoice_id: models.PrintableId,
                         access: InvoicesWrite) -> dict[str, Any]:
    metrics: ApiMetrics = request.app.state.metrics
    trace_id = request_trace_id(request)

    def work(cur: Cursor, _: Caller) -> dict[str, Any] | None:
        create.cancel(cur, invoice_id, created_at_text=now_text(), sealer=process_sealer(),
                      trace_id=trace_id)
        return reads.invoice(cur, invoice_id)

    try:
        found = await access.write(work)
    except Conflict:
        metrics.invoice_cancels.labels("refused").inc()
        raise
    metrics.invoice_cancels.labels("cancelled").inc()
    assert found is not None, "cancel found it, in the same transaction"
    return found
