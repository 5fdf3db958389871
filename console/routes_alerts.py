"""Alerts: what the stack's Alertmanager holds (firing, silenced, inhibited) and its
silences; a silence created with a reason and an expiry, and expired. The calls are
`paystream alerts`' own (stack/alerts.py); each action is recorded in the audit, the
silence's id with it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import Response

from paystream.console_kit.web import Form, Operator, Posted, act, render
from paystream.schema.db import Cursor
from paystream.stack import alerts
from paystream.stack.alertmanager import AlertmanagerConfig

router = APIRouter()
REFRESH_S = 15
DURATIONS = ("30m", "1h", "2h", "4h", "1d")
REFUSALS = (alerts.SilenceRefused, alerts.AlertmanagerUnavailable)
# Alertmanager's silence ids are UUIDs: nothing else is put in its API's path.
SilenceId = Annotated[str, Path(pattern=r"^[0-9a-fA-F-]{36}$")]


async def _page(request: Request, message: str) -> Response:
    cfg = AlertmanagerConfig.from_env()

    def read() -> tuple[list[alerts.Alert], list[alerts.Silence], str]:
        try:
            return alerts.alerts(cfg), alerts.silences(cfg), ""
        except alerts.AlertmanagerUnavailable as exc:
            return [], [], str(exc)

    held, silences, unavailable = await asyncio.to_thread(read)
    return render(request, "alerts.html", alerts=held, silences=silences,
                  unavailable=unavailable, durations=DURATIONS, refresh_s=REFRESH_S,
                  message=message)


@router.get("/alerts")
async def alerts_page(request: Request, _: Operator) -> Response:
    return await _page(request, "")


async def _act(request: Request, form: Form, action: str, target: str,
               call: Callable[[], str]) -> str:
    # Alertmanager's answer is awaited inside the record's transaction: the record
    # says what it did, or, refused, why not.
    def work(cur: Cursor) -> str:
        return call()

    return (await act(request, form, action, target, work, REFUSALS)).message


@router.post("/alerts/silence")
async def silence(request: Request, form: Posted) -> Response:
    name, group = form.get("alertname").strip(), form.get("group").strip()
    reason, expiry = form.get("reason").strip(), form.get("duration").strip()
    matchers = {"alertname": name, **({"group": group} if group else {})}
    target = ", ".join(f"{k}={v}" for k, v in matchers.items())

    def call() -> str:
        made = alerts.silence(AlertmanagerConfig.from_env(), matchers, reason,
                              alerts.parse_duration(expiry), form.session.actor)
        return f"silence {made} for {expiry}: {reason[:500]}"

    return await _page(request, await _act(request, form, "alert_silence", target, call))


@router.post("/silences/{silence_id}/expire")
async def expire(request: Request, form: Posted, silence_id: SilenceId) -> Response:
    def call() -> str:
        alerts.expire(AlertmanagerConfig.from_env(), silence_id)
        return f"silence {silence_id} expired"

    return await _page(request, await _act(request, form, "alert_silence_expire",
                                           f"silence {silence_id}", call))
