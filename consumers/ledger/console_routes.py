"""The ledger's console pages: open shortfalls with resolve, holds in flight, and the
reconciliation: run it now, and the last run's result (kept in operator_actions).

The ledger imports no feature: what a resolve and a reconcile need of the others (the
user told through notify/, the features' own checks) the console's app hands these
pages (`Handed`), as the command's parser hands the ledger's commands (paystream/cli.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from paystream.console_kit import audit
from paystream.console_kit.web import Operator, Posted, act, console_of, render
from paystream.consumers.ledger import shortfalls
from paystream.edge.params import RowIdPath
from paystream.schema.amounts import format_amount
from paystream.schema.db import Cursor
from paystream.schema.holds import open_holds

if TYPE_CHECKING:
    from paystream.consumers.ledger.reconcile import FeatureCheck

router = APIRouter()
RECONCILE = "reconcile"


@dataclass(frozen=True)
class Handed:
    """What the console's app hands these pages (`request.app.state.ledger_pages`): how a
    resolved shortfall's user is told, in the resolution's transaction, and the
    features' checks every reconcile runs (paystream/reconcile_checks.py)."""

    tell_resolved: shortfalls.TellResolved
    checks: Sequence[FeatureCheck]


def _handed(request: Request) -> Handed:
    handed: Handed = request.app.state.ledger_pages
    return handed


async def _page(request: Request, message: str = "", status: int = 200) -> Response:
    def read(cur: Cursor) -> dict[str, Any]:
        return {"shortfalls": shortfalls.list_shortfalls(cur),
                "holds": open_holds(cur, limit=200),
                "last_reconcile": audit.last_of(cur, RECONCILE)}

    seen = await console_of(request).db.read(read)
    return render(request, "ledger.html", status, message=message, **seen)


@router.get("/ledger")
async def ledger(request: Request, _: Operator) -> Response:
    return await _page(request)


@router.post("/shortfalls/{shortfall_id}/resolve")
async def resolve(request: Request, form: Posted, shortfall_id: RowIdPath) -> Response:
    resolution = form.get("resolution")

    def work(cur: Cursor) -> str:
        row, still_flagged = shortfalls.resolve(cur, shortfall_id, resolution,
                                                 _handed(request).tell_resolved)
        return (f"resolved: {row.user_id} owed {format_amount(row.amount)} {row.asset}"
                f" ({resolution.strip()[:500]}); "
                + ("still flagged: other shortfalls are open" if still_flagged
                   else "no longer flagged: withdrawals are accepted again"))

    acted = await act(request, form, "shortfall_resolve", f"shortfall {shortfall_id}", work,
                      (shortfalls.ResolveRefused,))
    return await _page(request, acted.message, 200 if acted.done else 409)


@router.post("/ledger/reconcile")
async def reconcile_now(request: Request, form: Posted) -> Response:
    """`paystream reconcile`, whole ledger, with every feature's own check as the command
    runs them (handed: paystream/reconcile_checks.py), on a connection of its own (one
    snapshot; it may take longer than a page's statement timeout on a large ledger)."""
    from paystream.consumers.ledger.reconcile import reconcile
    from paystream.consumers.ledger.reconcile_report import format_report
    from paystream.operator_cli import database

    checks = _handed(request).checks

    def run() -> tuple[bool, str]:
        with database("paystream-console-reconcile", autocommit=True) as conn:
            report = reconcile(conn, checks=checks)
        return report.clean, format_report(report)

    clean, text = await asyncio.to_thread(run)
    await console_of(request).db.write(lambda cur: audit.record(
        cur, form.session.actor, RECONCILE, "whole ledger", "done" if clean else "refused",
        text))
    return await _page(request, "reconcile: clean" if clean else "reconcile: MISMATCHES")
