"""The audit page: every operator action taken through the console, newest first."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from paystream.console_kit import audit
from paystream.console_kit.web import Operator, console_of, render
from paystream.edge.params import RowIdQuery

router = APIRouter()


@router.get("/audit")
async def audit_page(request: Request, _: Operator, before: RowIdQuery = None) -> Response:
    actions = await console_of(request).db.read(lambda cur: audit.recent(cur, before))
    more = actions[-1].id if len(actions) == audit.PAGE else None
    return render(request, "audit.html", actions=actions, more=more)
