"""Pure logic of the operator checks: verdicts, report formatting, the outcome rules."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

from prometheus_client import CollectorRegistry

from paystream.connectors.status import connector_summary
from paystream.consumers.ledger.conservation import CustodyMismatch, TransferProblem
from paystream.consumers.ledger.reconcile import BOOKS, HotPathReconciler, Mismatch, Report
from paystream.consumers.ledger.reconcile_report import format_report
from paystream.ops import cli as ops_cli
from paystream.ops import health, housekeeping
from paystream.ops.health import (
    CheckResult,
    Health,
    HealthChecker,
    HealthCollector,
    HealthSettings,
    Sample,
    format_table,
    worst,
)

ROOT = Path(__file__).resolve().parents[2]


def test_mismatch_difference_and_problem() -> None:
    m = Mismatch("available", "u1", "USDC", Decimal("8.5"), Decimal("7"))
    assert (m.difference, m.problem) == (Decimal("1.5"), "journal_differs")
    orphan = Mismatch("available", "u1", "ETH", None, Decimal("3"))
    assert (orphan.difference, orphan.problem) == (Decimal("-3"), "no_balance_row")
    negative = Mismatch("available", "u1", "BTC", Decimal("-1"), Decimal("-1"))
    assert (negative.difference, negative.problem) == (Decimal(0), "negative")


def test_report_formatting() -> None:
    clean = Report(12, [], "2026-01-01T00:00:00+00:00", transfers_checked=30)
    assert format_report(clean) == (
        "reconcile: ok, 12 balances match their accounts' postings, 30 transfers sum to"
        " zero, custody matches the chain deposits held (snapshot at"
        " 2026-01-01T00:00:00+00:00)")
    bad = Report(12, [Mismatch("available", "u1", "USDC",
                               Decimal("8.000000000000000000"), Decimal("7.5"))], "t",
                 transfer_problems=[TransferProblem(7, "USDC", "unbalanced",
                                                    "postings sum to -2")],
                 custody=[CustodyMismatch("ETH_MAINNET", "ETH", Decimal(3), Decimal(4))],
                 transfers_checked=30)
    assert not bad.clean
    lines = format_report(bad).splitlines()
    assert lines[0] == ("reconcile: 3 MISMATCH(ES) among 12 balances and 30 transfers"
                        " (snapshot at t)")
    assert lines[1].split() == ["book", "user", "asset", "balance", "postings_sum",
                                "difference", "problem"]
    assert lines[2].split() == ["available", "u1", "USDC", "8", "7.5", "0.5",
                                "journal_differs"]
    assert ["7", "USDC", "unbalanced", "postings", "sum", "to", "-2"] in \
        [line.split() for line in lines]
    assert ["ETH_MAINNET", "ETH", "3", "4", "-", "custody_differs"] in \
        [line.split() for line in lines]


def test_three_books_available_pending_held() -> None:
    assert [(b.name, b.column) for b in BOOKS] == [("available", "balance"),
                                                    ("pending", "pending"),
                                                    ("held", "held")]


def test_hot_path_is_due_only_with_work_and_after_the_interval() -> None:
    r = HotPathReconciler(interval_s=30)
    assert not r.due(now=1e9)  # nothing touched
    r.note_touched([("u", "USDC")])
    assert r.due(now=1e9)


def test_final_outcomes_match_the_schema_and_exclude_waiting_ones() -> None:
    # The latest migration that (re)defines the outcome constraint is the schema's.
    sql = next(text for p in sorted((ROOT / "schema" / "migrations").glob("*.sql"),
                                    reverse=True)
               if "processed_events" in (text := p.read_text()) and "outcome IN" in text)
    block = sql[sql.index("processed_events"):]
    block = block[block.index("outcome IN"):]
    allowed = set(re.findall(r"'(\w+)'", block[:block.index(")")]))
    assert set(housekeeping.FINAL_OUTCOMES) <= allowed
    assert {"pending_finality", "credited"} <= allowed
    # Waiting outcomes: a chain deposit not final, a credit a reorg may still reverse.
    assert "pending_finality" not in housekeeping.FINAL_OUTCOMES
    assert "credited" not in housekeeping.FINAL_OUTCOMES


def test_cli_check_names_match_the_health_module() -> None:
    assert ops_cli.CHECK_NAMES == health.CHECK_NAMES


def test_grading_and_connector_summary() -> None:
    assert health._grade(0, 1, 50) is Health.OK
    assert health._grade(1, 1, 50) is Health.WARN
    assert health._grade(50, 1, 50) is Health.UNHEALTHY
    assert connector_summary(404, {}) == "absent (not registered)"
    running = {"connector": {"state": "RUNNING"}, "tasks": [{"state": "RUNNING"}]}
    assert connector_summary(200, running) == "RUNNING"
    failed = {"connector": {"state": "RUNNING"}, "tasks": [{"state": "FAILED"}]}
    assert connector_summary(200, failed) == "RUNNING/FAILED"
    assert connector_summary(200, {"connector": {"state": "PAUSED"}}) == "PAUSED (no task)"


def test_thresholds_from_env_and_flags(monkeypatch) -> None:
    monkeypatch.setenv("PAYSTREAM_HEALTH_STUCK_AFTER_S", "5")
    monkeypatch.setenv("PAYSTREAM_HEALTH_LAG_WARN", "7")
    s = HealthSettings.from_env(lag_warn=None, lag_unhealthy=9.0)
    assert (s.stuck_after_s, s.lag_warn, s.lag_unhealthy) == (5.0, 7.0, 9.0)


RESULTS = [
    CheckResult("database", "postgres", "reachable", "3 ms", "5 s", Health.OK,
                (Sample("paystream_database_up", 1),)),
    CheckResult("consumer_lag", "kafka", "group ledger lag", "12 (1 member)", "1000",
                Health.WARN, (Sample("paystream_consumer_group_lag", 12,
                                      (("group", "ledger"), ("topic", "t"))),)),
    CheckResult("consumer_lag", "kafka", "group dlq-mirror lag", "error", "1000",
                Health.UNHEALTHY),
]


class FixedChecker(HealthChecker):
    """The collector's input without services: what run() returned (unit test only)."""

    def __init__(self) -> None:
        super().__init__(HealthSettings(dsn="", bootstrap="", connect_url="",
                                        connector_name="c"))

    def run(self, only=None) -> list[CheckResult]:
        return RESULTS


def test_table_and_overall_verdict() -> None:
    text = format_table(RESULTS)
    assert text.splitlines()[0].split() == ["component", "check", "value", "threshold",
                                            "verdict"]
    assert text.splitlines()[-1] == "overall: unhealthy"
    assert worst(RESULTS) is Health.UNHEALTHY and worst([]) is Health.OK


def test_collector_publishes_samples_and_worst_verdict_per_check() -> None:
    registry = CollectorRegistry()
    registry.register(HealthCollector(FixedChecker()))
    assert registry.get_sample_value("paystream_database_up") == 1
    assert registry.get_sample_value("paystream_consumer_group_lag",
                                     {"group": "ledger", "topic": "t"}) == 12
    assert registry.get_sample_value("paystream_health_check_verdict",
                                     {"check": "consumer_lag"}) == 2
    assert registry.get_sample_value("paystream_health_check_verdict",
                                     {"check": "database"}) == 0
