"""The features' own checks every reconcile runs beside the ledger's (the ledger knows no
feature, consumers/ledger/reconcile.py FeatureCheck): `paystream reconcile`, the health
exporter's full check and the restore drill all hand it this list."""

from __future__ import annotations

from collections.abc import Sequence

from paystream.consumers.ledger.reconcile import FeatureCheck, FeatureFindings
from paystream.invoices import reconcile_check
from paystream.schema.db import Cursor


def invoice_findings(checked: int, found: Sequence[reconcile_check.InvoiceMismatch]
                     ) -> FeatureFindings:
    return FeatureFindings("invoices", checked, reconcile_check.COLUMNS,
                           reconcile_check.table_rows(found),
                           f"{checked} invoices match their payments")


def _invoices(cur: Cursor, users: Sequence[str] | None) -> FeatureFindings:
    return invoice_findings(*reconcile_check.find_invoice_mismatches(cur, users))


FEATURE_CHECKS: tuple[FeatureCheck, ...] = (_invoices,)
