"""The merchant's own webhook endpoints (Svix's shape; docs/api.md#endpoints): POST, GET,
PATCH and DELETE /v1/endpoints, the secret and its rotation, the delivery log,
redelivery, recovery and a test. The rules are notify/merchant_endpoints.py's; every
route runs in one transaction whose key check set the merchant the database's policies
admit (api/auth.py), so another merchant's endpoint is not found."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import JSONResponse

from paystream.api import models, withdrawals
from paystream.api import models_endpoints as m
from paystream.api.auth import EndpointsRead, EndpointsWrite
from paystream.api.keys import Caller
from paystream.api.reads import parse_cursor
from paystream.api.routes_withdrawals import IDEMPOTENCY_HEADER
from paystream.api.settings import MAX_LIMIT
from paystream.notify import merchant_endpoints as endpoints
from paystream.notify.address_guard import AddressGuard
from paystream.schema.db import Cursor

router = APIRouter()
OptionalKey = Annotated[str | None, Header(
    alias=IDEMPOTENCY_HEADER, min_length=1, max_length=200,
    description="optional: the same key with the same request answers the first answer")]


def actor(caller: Caller) -> endpoints.Actor:
    return endpoints.Actor(f"api:{caller.key_id}", caller.merchant_id)


def _guard(request: Request) -> AddressGuard:
    guard: AddressGuard = request.app.state.endpoint_guard
    return guard


def _replayable(answer: dict[str, Any], replayed: bool, created: int = 200) -> JSONResponse:
    """The answer (JSON-ready: merchant_endpoints.jsonable), 200 when replayed."""
    return JSONResponse(answer, status_code=200 if replayed else created)


@router.post("/v1/endpoints", response_model=m.NewEndpointAnswer, status_code=201,
             responses={**models.ERRORS, 200: {"model": m.NewEndpointAnswer,
                                               "description": "this Idempotency-Key's"}},
             summary="create a webhook endpoint (its secret is in the answer)")
async def post_endpoint(request: Request, body: m.NewEndpoint, access: EndpointsWrite,
                        idempotency_key: Annotated[str, Header(
                            alias=IDEMPOTENCY_HEADER, min_length=1, max_length=200)]
                        ) -> JSONResponse:
    access.key()
    idem = withdrawals.check_idempotency_key(idempotency_key)
    guard = _guard(request)
    answer, replayed = await access.write(lambda cur, caller: endpoints.create(
        cur, actor(caller), url=body.url, event_types=body.event_types,
        description=body.description, merchant_id=body.merchant_id, guard=guard,
        idempotency_key=idem))
    return _replayable(answer, replayed, created=201)


@router.get("/v1/endpoints", response_model=m.Endpoints, responses=models.ERRORS,
            summary="the merchant's endpoints, by cursor")
async def get_endpoints(access: EndpointsRead,
                        cursor: Annotated[str | None, Query(max_length=40)] = None,
                        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50
                        ) -> dict[str, Any]:
    items, next_cursor = await access.read(lambda cur: endpoints.page(cur, cursor, limit))
    return {"items": items, "next_cursor": next_cursor}


@router.get("/v1/endpoints/{endpoint_id}", response_model=m.Endpoint,
            responses=models.ERRORS, summary="an endpoint")
async def get_endpoint(endpoint_id: models.PrintableId, access: EndpointsRead
                       ) -> dict[str, Any]:
    return await access.read(lambda cur: endpoints.get(cur, endpoint_id))


@router.patch("/v1/endpoints/{endpoint_id}", response_model=m.Endpoint,
              responses=models.ERRORS,
              summary="change an endpoint's url, event types, description, or enable it")
async def patch_endpoint(request: Request, endpoint_id: models.PrintableId,
                         body: m.EndpointChange, access: EndpointsWrite) -> dict[str, Any]:
    changes = body.model_dump(exclude_unset=True)
    guard = _guard(request)
    return await access.write(lambda cur, caller: endpoints.update(
        cur, actor(caller), endpoint_id, changes, guard))


@router.delete("/v1/endpoints/{endpoint_id}", status_code=204, responses=models.ERRORS,
               summary="delete an endpoint (nothing more is sent to it)")
async def delete_endpoint(endpoint_id: models.PrintableId, access: EndpointsWrite
                          ) -> Response:
    await access.write(lambda cur, caller: endpoints.delete(cur, actor(caller), endpoint_id))
    return Response(status_code=204)


@router.get("/v1/endpoints/{endpoint_id}/secret", response_model=m.Secret,
            responses=models.ERRORS, summary="the endpoint's signing secret")
async def get_secret(endpoint_id: models.PrintableId, access: EndpointsRead
                     ) -> dict[str, Any]:
    return await access.read(lambda cur: endpoints.secret(cur, endpoint_id))


@router.post("/v1/endpoints/{endpoint_id}/secret/rotate", response_model=m.Secret,
             responses=models.ERRORS,
             summary="a new secret; the previous one keeps signing for the overlap")
async def rotate_secret(request: Request, endpoint_id: models.PrintableId,
                        access: EndpointsWrite, idempotency_key: OptionalKey = None
                        ) -> JSONResponse:
    overlap = request.app.state.rotation_overlap_s
    answer, replayed = await access.write(lambda cur, caller: endpoints.rotate(
        cur, actor(caller), endpoint_id, overlap, idempotency_key))
    return _replayable(answer, replayed)


@router.get("/v1/endpoints/{endpoint_id}/deliveries", response_model=m.Attempts,
            responses=models.ERRORS,
            summary="the endpoint's delivery log, newest attempt first, by cursor")
async def get_deliveries(endpoint_id: models.PrintableId, access: EndpointsRead,
                         cursor: Annotated[str | None, Query(max_length=20)] = None,
                         limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50
                         ) -> dict[str, Any]:
    before = parse_cursor(cursor)

    def work(cur: Cursor) -> tuple[list[dict[str, Any]], str | None]:
        return endpoints.attempts(cur, endpoint_id, before, limit)

    items, next_cursor = await access.read(work)
    return {"items": items, "next_cursor": next_cursor}


@router.post("/v1/deliveries/{delivery_id}/redeliver", response_model=m.Redelivery,
             responses=models.ERRORS, summary="send one delivery again, now")
async def redeliver(delivery_id: models.PrintableId, access: EndpointsWrite
                    ) -> dict[str, Any]:
    return await access.write(lambda cur, caller: endpoints.redeliver(
        cur, actor(caller), delivery_id))


@router.post("/v1/endpoints/{endpoint_id}/recover", response_model=m.Recovered,
             responses=models.ERRORS,
             summary="send again every failed delivery made since a moment")
async def recover(endpoint_id: models.PrintableId, body: m.Recover, access: EndpointsWrite,
                  idempotency_key: OptionalKey = None) -> JSONResponse:
    answer, replayed = await access.write(lambda cur, caller: endpoints.recover(
        cur, actor(caller), endpoint_id, body.since, idempotency_key))
    return _replayable(answer, replayed)


@router.post("/v1/endpoints/{endpoint_id}/test", response_model=m.TestSent,
             status_code=202, responses=models.ERRORS,
             summary="send the endpoint a signed endpoint.test event")
async def test_endpoint(endpoint_id: models.PrintableId, access: EndpointsWrite,
                        idempotency_key: OptionalKey = None) -> JSONResponse:
    answer, replayed = await access.write(lambda cur, caller: endpoints.test(
        cur, actor(caller), endpoint_id, idempotency_key))
    return _replayable(answer, replayed, created=202)
