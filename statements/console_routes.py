"""Settlement statements: the list, and one statement's reconciliation page (its counts
per result, its payouts, its lines beside our events, filtered by result) with the
approval of a proposed fee adjustment. The decisions are the `paystream statements`
commands' own functions (statements/decisions.py), each with its record in one
transaction."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from paystream.console_kit.web import Operator, Posted, Refused, act, console_of, render
from paystream.edge.params import RowIdPath, RowIdQuery, text_query
from paystream.schema.db import Cursor
from paystream.statements import decisions, reads

router = APIRouter()
PAGE = 200


@router.get("/statements")
async def statement_list(request: Request, _: Operator) -> Response:
    rows = await console_of(request).db.read(reads.list_statements)
    return render(request, "statements.html", statements=rows, message="")


async def _page(request: Request, statement_id: int, result: str, after: int,
                message: str = "", status: int = 200) -> Response:
    if result not in ("", "unresolved", *reads.RESULTS):
        raise Refused(400, f"result is one of {', '.join(reads.RESULTS)} or unresolved")

    def read(cur: Cursor) -> dict[str, Any]:
        found = reads.statement(cur, statement_id)
        if found is None:
            raise Refused(404, f"no statement {statement_id}")
        return {"statement": found, "counts": reads.counts(cur, statement_id),
                "payouts": reads.payouts(cur, statement_id),
                "lines": reads.lines(cur, statement_id,
                                     result=result if result in reads.RESULTS else None,
                                     unresolved_only=result == "unresolved", after=after,
                                     limit=PAGE)}

    seen = await console_of(request).db.read(read)
    return render(request, "statement.html", status, message=message, result=result,
                  results=reads.RESULTS, page=PAGE, **seen)


@router.get("/statements/{statement_id}")
async def statement_page(request: Request, _: Operator, statement_id: RowIdPath,
                         result: Annotated[str, text_query(40)] = "unresolved",
                         after: RowIdQuery = None) -> Response:
    return await _page(request, statement_id, result, after or 0)


@router.post("/statements/{statement_id}/decisions/{decision_id}/approve")
async def approve(request: Request, form: Posted, statement_id: RowIdPath,
                  decision_id: RowIdPath) -> Response:
    """A proposed fee adjustment approved by this operator (not its proposer): the
    adjustment is written through the outbox (statements/decisions.py approve)."""
    reason = form.get("reason")

    def work(cur: Cursor) -> str:
        done = decisions.approve(cur, decision_id, actor=form.session.actor, reason=reason,
                                 statement_id=statement_id)
        return f"approved: adjustment {done.event_id} of {done.amount}"

    acted = await act(request, form, "statement_fee_approve",
                      f"statement {statement_id} decision {decision_id}", work,
                      (decisions.DecisionError,))
    return await _page(request, statement_id, "unresolved", 0, acted.message,
                       200 if acted.done else 409)
