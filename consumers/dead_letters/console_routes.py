"""Dead letters: the list with its filters, one in detail, replay (one, or every one
matching a filter after a confirm step that shows how many), and discard with a reason.
A replay or discard runs the operator commands' own functions, and the pages read through
the queue's own (consumers/dead_letters/replay.py: no SQL here); an action's record in
operator_actions commits with it."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from paystream.console_kit.web import Form, Operator, Posted, Refused, act, console_of, render
from paystream.consumers.dead_letters.replay import (
    DeadLetterFilter,
    ReplayRefused,
    count_open_by_reason,
    discard,
    list_dead_letters,
    matching_ids,
    replay,
    show_dead_letter,
    stored_event,
)
from paystream.edge.params import RowIdPath, RowIdQuery, text_query
from paystream.schema.db import Cursor

router = APIRouter()
PAGE = 100
Filter = Annotated[str, text_query(200)]  # a status, reason, provider or age
STATUSES = ("open", "replayed", "discarded")
AGES = {"": None, "1h": 3600.0, "24h": 86400.0, "7d": 7 * 86400.0}


def _filter(status: str, reason: str, provider: str, age: str) -> DeadLetterFilter:
    if status not in (*STATUSES, "all"):
        raise Refused(400, f"status is one of {', '.join(STATUSES)} or all")
    span = age.removeprefix("older:")
    if span not in AGES or age == "older:":
        raise Refused(400, "age is 1h, 24h or 7d (newer than), or older:1h, older:24h, "
                           "older:7d")
    older = AGES[span] if age.startswith("older:") else None
    return DeadLetterFilter(status=None if status == "all" else status,
                            reason=reason.strip()[:200] or None,
                            provider=provider.strip()[:200] or None,
                            older_than_s=older,
                            newer_than_s=None if age.startswith("older:") else AGES[age])


def _query(status: str, reason: str, provider: str, age: str) -> str:
    return urlencode({"status": status, "reason": reason, "provider": provider, "age": age})


@router.get("/dead-letters")
async def dead_letters(request: Request, _: Operator, status: Filter = "open",
                       reason: Filter = "", provider: Filter = "", age: Filter = "",
                       before: RowIdQuery = None) -> Response:
    matching = _filter(status, reason, provider, age)

    def read(cur: Cursor) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
        rows = list_dead_letters(cur, limit=PAGE + 1, matching=matching, before_id=before)
        return rows, count_open_by_reason(cur)

    rows, open_reasons = await console_of(request).db.read(read)
    more = rows[PAGE]["id"] if len(rows) > PAGE else None
    return render(request, "dead_letters.html", rows=rows[:PAGE], more=more,
                  status=status, reason=reason, provider=provider, age=age,
                  statuses=STATUSES, ages=AGES, open_reasons=open_reasons,
                  query=_query(status, reason, provider, age))


def _detail(cur: Any, dlq_id: int) -> dict[str, Any]:
    row = show_dead_letter(cur, dlq_id)
    if row is None:
        raise Refused(404, f"no dead letter with id {dlq_id}")
    stored = None
    found = stored_event(cur, row["event_id"]) if row.get("event_id") else None
    if found is not None:
        stored = {"status": found[0], "provider": found[1],
                  "body": json.dumps(found[2], indent=2, sort_keys=True,
                                     ensure_ascii=False)}
    row["attempts_text"] = json.dumps(row.get("attempts"), indent=2, ensure_ascii=False)
    row["headers_text"] = json.dumps(row.get("headers"), indent=2, ensure_ascii=False)
    return {"dead": row, "stored": stored}


@router.get("/dead-letters/{dlq_id}")
async def dead_letter(request: Request, _: Operator, dlq_id: RowIdPath) -> Response:
    seen = await console_of(request).db.read(lambda cur: _detail(cur, dlq_id))
    return render(request, "dead_letter.html", message="", **seen)


async def _act(request: Request, form: Form, dlq_id: int, action: str,
               work: Callable[[Cursor], str]) -> Response:
    acted = await act(request, form, action, f"dead letter {dlq_id}", work, (ReplayRefused,))
    seen = await console_of(request).db.read(lambda cur: _detail(cur, dlq_id))
    return render(request, "dead_letter.html", 200 if acted.done else 409,
                  message=acted.message, **seen)


def _replayed(cur: Cursor, dlq_id: int) -> str:
    done = replay(cur, dlq_id)
    return f"replayed: event {done.event_id} sent again (message id {done.outbox_id})"


@router.post("/dead-letters/{dlq_id}/replay")
async def replay_one(request: Request, form: Posted, dlq_id: RowIdPath) -> Response:
    return await _act(request, form, dlq_id, "dlq_replay", partial(_replayed, dlq_id=dlq_id))


@router.post("/dead-letters/{dlq_id}/discard")
async def discard_one(request: Request, form: Posted, dlq_id: RowIdPath) -> Response:
    reason = form.get("reason")

    def work(cur: Cursor) -> str:
        discard(cur, dlq_id, reason)
        return f"discarded: {reason.strip()}"

    return await _act(request, form, dlq_id, "dlq_discard", work)


@router.get("/dead-letters-bulk")
async def bulk_confirm(request: Request, _: Operator, status: Filter = "open",
                       reason: Filter = "", provider: Filter = "", age: Filter = ""
                       ) -> Response:
    """The confirm step: how many a bulk replay of this filter would send."""
    if status != "open":
        raise Refused(400, "only open dead letters can be replayed")
    matching = _filter(status, reason, provider, age)
    limit = console_of(request).settings.bulk_replay_limit
    ids = await console_of(request).db.read(lambda cur: matching_ids(cur, matching,
                                                                     limit + 1))
    return render(request, "bulk_confirm.html", count=min(len(ids), limit),
                  capped=len(ids) > limit, limit=limit, status=status, reason=reason,
                  provider=provider, age=age, result=None)


@router.post("/dead-letters-bulk")
async def bulk_replay(request: Request, form: Posted) -> Response:
    """Replay every open dead letter matching the filter, oldest first, at most the count
    the operator confirmed."""
    matching = _filter("open", form.get("reason"), form.get("provider"), form.get("age"))
    count = form.get("count")
    if not (count.isascii() and count.isdigit()):
        raise Refused(400, "the confirmed count is missing or not a number")
    db = console_of(request).db
    # Never more than the console's limit, whatever count the form claims (and no
    # int() of a 60,000-digit string: Python refuses past 4,300 digits).
    limit = console_of(request).settings.bulk_replay_limit
    confirmed = limit if len(count) > 12 else min(int(count), limit)
    ids = await db.read(lambda cur: matching_ids(cur, matching, confirmed))
    replayed: list[int] = []
    refused: list[tuple[int, str]] = []
    for dlq_id in ids:  # each its own transaction: one refusal stops nothing else
        acted = await act(request, form, "dlq_replay", f"dead letter {dlq_id}",
                          partial(_replayed, dlq_id=dlq_id), (ReplayRefused,))
        if acted.done:
            replayed.append(dlq_id)
        else:
            refused.append((dlq_id, acted.message.removeprefix("refused: ")))
    return render(request, "bulk_confirm.html", count=len(ids), capped=False, limit=0,
                  status="open", reason=form.get("reason"), provider=form.get("provider"),
                  age=form.get("age"), result={"replayed": replayed, "refused": refused})
