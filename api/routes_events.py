"""GET /v1/events/{event_id}: an event's status, outcome and ledger entries."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from paystream.api import models, reads
from paystream.api.auth import EventsRead
from paystream.edge.errors import NotFoundError

router = APIRouter()


@router.get("/v1/events/{event_id:path}", response_model=models.EventStatus,
            responses=models.ERRORS, summary="an event's status, outcome and ledger entries")
async def get_event(event_id: models.PrintableId, access: EventsRead) -> dict[str, Any]:
    found = await access.read(lambda cur: reads.event(cur, event_id))
    if found is None:
        raise NotFoundError(f"no event {event_id[:200]!r}", code="unknown_event")
    return found
