"""The ledger's self-check: every balance must equal the postings of its account, and
never be negative. Owned by the ledger (it runs inside the ledger consumer); `paystream
reconcile` (reconcile_report.py) runs the same check over every balance, and the
conservation checks of consumers/ledger/conservation.py (every transfer sums to zero,
custody equals the chain deposits held).

The invariant, per (user, asset) and per book (a balances column and the user account
it copies, schema/accounts.py):

    balances.<column> == Σ postings.amount of the account   and   balances.<column> >= 0

and postings with no balance row are a mismatch too. Three books: `available`
(balances.balance), `pending` (balances.pending: chain deposits held until final) and
`held` (balances.held: withdrawals in flight).

A FLAGGED account (an open account_shortfalls row: a reversal available could not
cover) is not a mismatch: the postings hold exactly what moved, so its balance still
equals them and is >= 0. The report lists the open shortfalls beside the check, for the
operator, without failing it.

Two ways to run it:
- `paystream reconcile` (ops/cli.py) checks every balance (or the `--user`s given) in ONE
  snapshot;
- HotPathReconciler runs inside the ledger consumer on the balances its batches touched,
  every `interval_s`, and reports through Prometheus and critical log lines.

Both read one snapshot (schema.db.snapshot). A batch's balance update and its transfers
commit together, so the snapshot sees both or neither: a mismatch is never a race with
the ledger.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import psycopg2
import structlog
from prometheus_client import Counter, Gauge

from paystream.consumers.ledger.conservation import (
    ChainBalances,
    CustodyMismatch,
    TransferProblem,
    count_transfers,
    find_custody_mismatches,
    find_transfer_problems,
    unbalanced_assets,
)
from paystream.consumers.ledger.settings import LedgerSettings
from paystream.schema.accounts import BALANCE_COLUMNS, AccountKind
from paystream.schema.balances import BalanceKey
from paystream.schema.db import Connection, Cursor, one_row, snapshot

# -- metrics (declared once; `scope` is hot_path for the ledger's check, full for a
#    whole-ledger check run by a long-lived process such as the health exporter) --------

# Balances that did not match their journal (or were negative) at the latest check.
# The hot path keeps re-checking a mismatched pair until it is clean, so this stays
# above zero until someone fixes the money.
MISMATCHES = Gauge(
    "paystream_reconciliation_mismatches",
    "Balances out of line with their journal at the latest check", ["scope"])
# Reconciliation runs that completed (with or without mismatches).
CHECKS = Counter(
    "paystream_reconciliation_checks_total", "Reconciliation checks completed", ["scope"])
# (user, asset) balances compared, summed over checks.
PAIRS_CHECKED = Counter(
    "paystream_reconciliation_balances_checked_total",
    "Balances compared with their journal", ["scope"])
# Checks that could not run (database error); the consumer carries on regardless.
ERRORS = Counter(
    "paystream_reconciliation_errors_total", "Reconciliation checks that failed to run",
    ["scope"])
# Unix time of the latest completed check: an alert can tell "clean" from "not running".
LAST_CHECK = Gauge(
    "paystream_reconciliation_last_check_timestamp_seconds",
    "When the latest reconciliation check completed", ["scope"])

SCOPE_HOT_PATH = "hot_path"
SCOPE_FULL = "full"


@dataclass(frozen=True)
class Book:
    """A balances column and the user account whose postings must sum to it. Both
    strings are code constants, never user input: they are formatted into the SQL."""

    name: str
    column: str


AVAILABLE = Book(AccountKind.AVAILABLE.value, BALANCE_COLUMNS[AccountKind.AVAILABLE])
PENDING = Book(AccountKind.PENDING.value, BALANCE_COLUMNS[AccountKind.PENDING])
HELD = Book(AccountKind.HELD.value, BALANCE_COLUMNS[AccountKind.HELD])
BOOKS: tuple[Book, ...] = (AVAILABLE, PENDING, HELD)


@dataclass(frozen=True)
class Mismatch:
    book: str
    user_id: str
    asset: str
    balance: Decimal | None  # None: the journal has rows but no balance row exists
    journal: Decimal

    @property
    def difference(self) -> Decimal:
        """Balance minus journal sum: positive means money that no event explains."""
        return (self.balance if self.balance is not None else Decimal(0)) - self.journal

    @property
    def problem(self) -> str:
        if self.balance is None:
            return "no_balance_row"
        if self.balance != self.journal:
            return "journal_differs"
        return "negative"

    @property
    def pair(self) -> BalanceKey:
        return (self.user_id, self.asset)


@dataclass(frozen=True)
class Shortfall:
    """An open shortfall: what a reversal could not take from the user's balance."""

    user_id: str
    asset: str
    owed: Decimal
    source_event_id: str


@dataclass(frozen=True)
class FeatureFindings:
    """A feature's own check of what it keeps beside the books (invoices against their
    payments, invoices/reconcile_check.py), handed to `reconcile` by the command that
    runs it (paystream/reconcile_checks.py): the ledger knows no feature. `rows` are the
    problems found, one per line of the operator's table under `columns`; none is a
    clean check of `checked` `noun`."""

    noun: str
    checked: int
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]
    clean_text: str  # the clean report's words for it, e.g. "4 invoices match their payments"


# A feature check: in reconcile's snapshot, for every user or those named.
FeatureCheck = Callable[[Cursor, Sequence[str] | None], FeatureFindings]


@dataclass(frozen=True)
class Report:
    balances_checked: int
    mismatches: list[Mismatch]
    snapshot_at: str  # the snapshot's now(), for the operator's record
    flagged: list[Shortfall] = field(default_factory=list)  # informational, not failing
    transfer_problems: list[TransferProblem] = field(default_factory=list)
    custody: list[CustodyMismatch] = field(default_factory=list)
    transfers_checked: int = 0
    features: list[FeatureFindings] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.mismatches or self.transfer_problems or self.custody
                    or any(f.rows for f in self.features))


def _scope_filter(users: Sequence[str] | None, pairs: Sequence[BalanceKey] | None
                  ) -> tuple[str, dict[str, list[str]]]:
    """A WHERE clause (for any relation with user_id, asset) and its parameters."""
    if pairs is not None:
        return ("WHERE (user_id, asset) IN"
                " (SELECT u, a FROM unnest(%(pu)s::text[], %(pa)s::text[]) AS x(u, a))",
                {"pu": [p[0] for p in pairs], "pa": [p[1] for p in pairs]})
    if users is not None:
        return "WHERE user_id = ANY(%(users)s::text[])", {"users": list(users)}
    return "", {}


def _book_sql(book: Book, where: str) -> str:
    # FULL JOIN: a balance with no account (or no postings) must be zero, postings with
    # no balance row are a mismatch on their own. The scope (`where`) is pushed into
    # the account subquery, so a few pairs are read by index, not by scanning postings.
    return f"""
        WITH acct AS (
            SELECT user_id, asset, account_id FROM (
                SELECT owner AS user_id, asset, account_id FROM accounts
                WHERE kind = '{book.name}') AS scoped {where}
        ), journal AS (
            SELECT a.user_id, a.asset, coalesce(sum(p.amount), 0) AS total
            FROM acct a LEFT JOIN postings p ON p.account_id = a.account_id
            GROUP BY a.user_id, a.asset
        ), bal AS (
            SELECT user_id, asset, {book.column} AS amount FROM balances {where}
        )
        SELECT user_id, asset, b.amount, coalesce(j.total, 0)
        FROM bal AS b FULL JOIN journal AS j USING (user_id, asset)
        WHERE (b.amount IS NULL AND j.total <> 0) OR b.amount <> coalesce(j.total, 0)
            OR b.amount < 0
        ORDER BY user_id, asset"""


def find_mismatches(cur: Cursor, *, users: Sequence[str] | None = None,
                    pairs: Sequence[BalanceKey] | None = None,
                    books: Sequence[Book] = BOOKS) -> tuple[int, list[Mismatch]]:
    """(balances in scope, mismatches) using `cur`'s transaction as the snapshot."""
    where, params = _scope_filter(users, pairs)
    cur.execute(f"SELECT count(*) FROM balances {where}", params)
    checked = int(one_row(cur)[0])
    found: list[Mismatch] = []
    for book in books:
        cur.execute(_book_sql(book, where), params)
        found.extend(Mismatch(book.name, u, a, bal, total)
                     for u, a, bal, total in cur.fetchall())
    return checked, found


def reconcile(conn: Connection, *, users: Sequence[str] | None = None,
              chain: ChainBalances | None = None,
              checks: Sequence[FeatureCheck] = ()) -> Report:
    """Check every balance and transfer (or those of `users`), each feature's `checks`,
    and, for the whole ledger, custody against the chain deposits (and the chain itself,
    through `chain`), in one consistent snapshot."""
    with snapshot(conn) as cur:
        cur.execute("SELECT now()")
        at = one_row(cur)[0]
        transfers = count_transfers(cur, users)
        checked, mismatches = find_mismatches(cur, users=users)
        flagged = open_shortfalls(cur, users=users)
        problems = find_transfer_problems(cur, users)
        custody: list[CustodyMismatch] = []
        if users is None:  # whole-ledger checks
            problems += unbalanced_assets(cur)
            custody = find_custody_mismatches(cur, chain)
        features = [check(cur, users) for check in checks]
    return Report(checked, mismatches, at.isoformat(), flagged, problems, custody,
                  int(transfers), features)


def open_shortfalls(cur: Cursor, *, users: Sequence[str] | None = None) -> list[Shortfall]:
    """Unresolved account_shortfalls rows (the flagged accounts), in `cur`'s snapshot."""
    where, params = _scope_filter(users, None)
    extra = "AND" if where else "WHERE"
    cur.execute(f"SELECT user_id, asset, amount, source_event_id FROM account_shortfalls"
                f" {where} {extra} resolved_at IS NULL ORDER BY user_id, asset, id", params)
    return [Shortfall(u, a, owed, src) for u, a, owed, src in cur.fetchall()]


def log_mismatch(m: Mismatch, scope: str) -> None:
    # Looked up per call (not cached at import) so the line goes through whatever
    # logging configuration is current.
    structlog.get_logger("consumers.reconcile").critical(
        "reconciliation_mismatch", scope=scope, book=m.book, user_id=m.user_id,
        asset=m.asset, problem=m.problem,
        balance=None if m.balance is None else str(m.balance),
        journal_sum=str(m.journal), difference=str(m.difference))


class HotPathReconciler:
    """Reconciles the balances the ledger touched, at most once per `interval_s`.

    The ledger calls `note_touched` with every batch's (user, asset) pairs and
    `maybe_check` between batches (never inside the batch transaction). Pairs found
    mismatched are re-checked at every later check until they are clean, so the gauge
    and the alert stay up until the money is fixed. A failing check is logged and
    counted, never raised: reconciliation must not stall payments.
    """

    def __init__(self, interval_s: float = 30.0, max_pairs: int = 5000,
                 scope: str = SCOPE_HOT_PATH) -> None:
        self.interval_s = interval_s
        # Bounds one check's cost; the remainder waits for the next interval.
        self.max_pairs = max_pairs
        self.scope = scope
        self._touched: set[BalanceKey] = set()
        self._bad: dict[BalanceKey, Mismatch] = {}
        self._last_check = float("-inf")

    def note_touched(self, pairs: Iterable[BalanceKey]) -> None:
        self._touched.update(pairs)

    def due(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return (bool(self._touched) or bool(self._bad)) and \
            now - self._last_check >= self.interval_s

    @classmethod
    def from_env(cls) -> HotPathReconciler:
        settings = LedgerSettings.from_env()
        return cls(interval_s=settings.reconcile_interval_s,
                   max_pairs=settings.reconcile_max_pairs)

    def maybe_check(self, conn: Connection | Callable[[], Connection]) -> list[Mismatch]:
        """Check the touched (and known-bad) pairs if the interval has passed.

        `conn` is a connection with no open transaction, or a function returning one
        (called only when a check is due, e.g. the consumer's `Database.connection`).
        Returns the mismatches found now ([] when clean, not due, or the check failed).
        """
        if not self.due():
            return []
        self._last_check = time.monotonic()
        todo = sorted(self._touched | set(self._bad))
        batch, rest = todo[:self.max_pairs], todo[self.max_pairs:]
        try:
            if callable(conn):
                conn = conn()
            with snapshot(conn) as cur:
                checked, found = find_mismatches(cur, pairs=batch)
        except (psycopg2.Error, RuntimeError) as exc:
            ERRORS.labels(self.scope).inc()
            structlog.get_logger("consumers.reconcile").error(
                "reconciliation_failed", scope=self.scope, error=str(exc).strip()[:300])
            return []
        self._touched = set(rest)
        self._record(batch, checked, found)
        return found

    def _record(self, batch: Sequence[BalanceKey], checked: int, found: list[Mismatch]) -> None:
        now_bad = {m.pair: m for m in found}
        for pair in batch:
            was = self._bad.pop(pair, None)
            if was is not None and pair not in now_bad:
                structlog.get_logger("consumers.reconcile").warning(
                    "reconciliation_mismatch_resolved", scope=self.scope,
                    user_id=pair[0], asset=pair[1])
        for m in found:
            log_mismatch(m, self.scope)
        self._bad.update(now_bad)
        MISMATCHES.labels(self.scope).set(len(self._bad))
        CHECKS.labels(self.scope).inc()
        PAIRS_CHECKED.labels(self.scope).inc(checked)
        LAST_CHECK.labels(self.scope).set(time.time())

    @property
    def known_mismatches(self) -> list[Mismatch]:
        return sorted(self._bad.values(), key=lambda m: m.pair)


def record_full_check(report: Report) -> None:
    """Publish a whole-ledger check's result (scope `full`) and log its mismatches."""
    for m in report.mismatches:
        log_mismatch(m, SCOPE_FULL)
    for t in report.transfer_problems:
        structlog.get_logger("consumers.reconcile").critical(
            "reconciliation_transfer_problem", scope=SCOPE_FULL, transfer_id=t.transfer_id,
            asset=t.asset, problem=t.problem, detail=t.detail)
    for c in report.custody:
        structlog.get_logger("consumers.reconcile").critical(
            "reconciliation_custody_mismatch", scope=SCOPE_FULL, network=c.network,
            asset=c.asset, problem=c.problem, books=str(c.books), deposits=str(c.deposits),
            on_chain=None if c.on_chain is None else str(c.on_chain))
    for f in report.features:
        for row in f.rows:
            structlog.get_logger("consumers.reconcile").critical(
                "reconciliation_feature_problem", scope=SCOPE_FULL, feature=f.noun,
                **dict(zip(f.columns, row, strict=True)))
    MISMATCHES.labels(SCOPE_FULL).set(
        len(report.mismatches) + len(report.transfer_problems) + len(report.custody)
        + sum(len(f.rows) for f in report.features))
    CHECKS.labels(SCOPE_FULL).inc()
    PAIRS_CHECKED.labels(SCOPE_FULL).inc(report.balances_checked)
    LAST_CHECK.labels(SCOPE_FULL).set(time.time())
