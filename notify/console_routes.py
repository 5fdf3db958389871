"""Notifications: deliveries by state, one intent with its attempts and response codes,
redeliver, recover the failed since a time; the endpoints, with disable and enable.
The actions are the `paystream notify` commands' own functions (notify/operator.py,
notify/endpoints.py), each with its record in one transaction."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from paystream.console_kit.web import Form, Operator, Posted, Refused, act, console_of, render
from paystream.edge.params import PrintableIdPath, text_query
from paystream.notify import endpoints, operator
from paystream.schema.db import Cursor

router = APIRouter()
STATES = ("pending", "delivered", "failed")
PAGE = 100


@router.get("/notifications")
async def deliveries(request: Request, _: Operator,
                     state: Annotated[str, text_query(20)] = "failed",
                     user: Annotated[str, text_query(200)] = "") -> Response:
    if state not in (*STATES, "all"):
        raise Refused(400, f"state is one of {', '.join(STATES)} or all")
    slots = await console_of(request).db.read(lambda cur: operator.list_slots(
        cur, user_id=user.strip() or None, state=None if state == "all" else state,
        limit=PAGE))
    return render(request, "notifications.html", slots=slots, state=state, user=user,
                  states=STATES, message="")


async def _show(request: Request, intent_id: str) -> dict[str, Any]:
    def read(cur: Cursor) -> dict[str, Any]:
        try:
            intent, slots, attempts = operator.show(cur, intent_id)
        except operator.NotFound:
            raise Refused(404, f"no notification {intent_id}") from None
        return {"intent": intent, "slots": slots, "attempts": attempts,
                "endpoints": endpoints.list_endpoints(cur)}

    return await console_of(request).db.read(read)


@router.get("/notifications/{intent_id}")
async def intent_page(request: Request, _: Operator, intent_id: PrintableIdPath) -> Response:
    return render(request, "intent.html", message="", **await _show(request, intent_id))


async def _act(request: Request, form: Form, action: str, target: str,
               work: Callable[[Cursor], str]) -> str:
    acted = await act(request, form, action, target, work,
                      (operator.NotFound, endpoints.EndpointRefused))
    return acted.message


@router.post("/notifications/{intent_id}/redeliver")
async def redeliver(request: Request, form: Posted, intent_id: PrintableIdPath) -> Response:
    endpoint_id = form.get("endpoint_id").strip() or None
    message = await _act(request, form, "notify_redeliver", f"notification {intent_id}",
                         lambda cur: f"{operator.redeliver(cur, intent_id, endpoint_id)}"
                                     " delivery(ies) due again now")
    return render(request, "intent.html", message=message, **await _show(request, intent_id))


@router.post("/notifications-recover")
async def recover(request: Request, form: Posted) -> Response:
    try:
        since = datetime.fromisoformat(form.get("since").strip())
    except ValueError:
        raise Refused(400, "since is an ISO 8601 moment, e.g. 2026-12-05T10:00:00Z") from None
    since = since if since.tzinfo is not None else since.replace(tzinfo=UTC)
    endpoint_id = form.get("endpoint_id").strip() or None
    message = await _act(request, form, "notify_recover", f"failed since {since.isoformat()}",
                         lambda cur: f"{operator.recover(cur, since, endpoint_id)} failed"
                                     " delivery(ies) due again now")
    slots = await console_of(request).db.read(lambda cur: operator.list_slots(
        cur, user_id=None, state="failed", limit=PAGE))
    return render(request, "notifications.html", slots=slots, state="failed", user="",
                  states=STATES, message=message)


@router.get("/endpoints")
async def endpoint_list(request: Request, _: Operator) -> Response:
    rows = await console_of(request).db.read(endpoints.list_endpoints)
    return render(request, "endpoints.html", endpoints=rows, message="")


@router.post("/endpoints/{endpoint_id}/disable")
async def disable(request: Request, form: Posted, endpoint_id: PrintableIdPath) -> Response:
    reason = form.get("reason").strip()
    if not reason:
        raise Refused(400, "say why the endpoint is disabled: it is the record")

    def work(cur: Cursor) -> str:
        endpoints.disable(cur, endpoint_id, reason[:500])
        return f"endpoint {endpoint_id} disabled: {reason[:500]}"

    message = await _act(request, form, "endpoint_disable", endpoint_id, work)
    rows = await console_of(request).db.read(endpoints.list_endpoints)
    return render(request, "endpoints.html", endpoints=rows, message=message)


@router.post("/endpoints/{endpoint_id}/enable")
async def enable(request: Request, form: Posted, endpoint_id: PrintableIdPath) -> Response:
    def work(cur: Cursor) -> str:
        endpoints.enable(cur, endpoint_id)
        return f"endpoint {endpoint_id} enabled: its pending deliveries are sent again"

    message = await _act(request, form, "endpoint_enable", endpoint_id, work)
    rows = await console_of(request).db.read(endpoints.list_endpoints)
    return render(request, "endpoints.html", endpoints=rows, message=message)
