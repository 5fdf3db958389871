"""Withdrawals: POST /v1/withdrawals (once per Idempotency-Key; the rules are
api/withdrawals.py's) and GET /v1/withdrawals/{withdrawal_id}."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse

from paystream.api import models, reads, withdrawals
from paystream.api.auth import WithdrawalsRead, WithdrawalsWrite
from paystream.api.metrics import ApiMetrics
from paystream.api.settings import ApiSettings
from paystream.edge.errors import ConflictError, NotFoundError
from paystream.edge.observe import request_trace_id

router = APIRouter()
IDEMPOTENCY_HEADER = "Idempotency-Key"


@router.post("/v1/withdrawals", response_model=models.WithdrawalRequested, status_code=202,
             responses=models.ERRORS, summary="request a withdrawal (held until the gateway"
                                              " settles or fails it)")
async def post_withdrawal(request: Request, body: models.NewWithdrawal, access: WithdrawalsWrite,
                          idempotency_key: Annotated[str, Header(
                              alias=IDEMPOTENCY_HEADER, min_length=1, max_length=200,
                              description="the same key with the same body answers"
                                          " the first answer again; with another"
                                          " body 409")]
                          ) -> JSONResponse:
    settings: ApiSettings = request.app.state.settings
    metrics: ApiMetrics = request.app.state.metrics
    access.key()  # no usable key: 401 before the request's own rules are judged
    idem = withdrawals.check_idempotency_key(idempotency_key)
    wanted = withdrawals.parse_request(body.user_id, body.asset, body.amount,
                                       body.destination, settings.withdrawal_assets)
    trace_id = request_trace_id(request)
    try:
        status, answer, replayed = await access.write(
            lambda cur, caller: withdrawals.request(
                cur, key_id=caller.key_id, idempotency_key=idem, wanted=wanted,
                provider=settings.withdrawal_provider, trace_id=trace_id))
    except ConflictError:
        metrics.withdrawals.labels("conflict").inc()
        raise
    metrics.withdrawals.labels("replayed" if replayed else "accepted").inc()
    return JSONResponse(answer, status_code=status)


@router.get("/v1/withdrawals/{withdrawal_id}", response_model=models.Withdrawal,
            responses=models.ERRORS, summary="a requested withdrawal's state")
async def get_withdrawal(withdrawal_id: models.PrintableId, access: WithdrawalsRead
                         ) -> dict[str, Any]:
    found = await access.read(lambda cur: reads.withdrawal(cur, withdrawal_id))
    if found is None:
        raise NotFoundError(f"no withdrawal {withdrawal_id[:200]!r}",
                            code="unknown_withdrawal")
    return found
