"""The invoice reminders' settings and key (pure): offsets as durations or seconds, each
a whole second, none twice; the key names the deadline, so a moved deadline is a new
cycle."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from paystream.env import SettingsError
from paystream.notify.reminders import invoice_key, must_sweep
from paystream.notify.settings import ReminderSettings, parse_duration

VARIABLE = "PAYSTREAM_INVOICE_REMINDERS"


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90.0), ("90s", 90.0), ("15m", 900.0), ("6h", 21_600.0), ("2d", 172_800.0),
    (" 1H ", 3600.0), ("1.5h", 5400.0)])
def test_a_duration_reads_with_or_without_its_unit(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "6x", "-1h", "1h30m", "six hours"])
def test_anything_else_is_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_the_default_chain_is_6h_3h_1h() -> None:
    assert ReminderSettings.from_env({}).invoice_reminders_s == (21_600.0, 10_800.0, 3600.0)


def test_offsets_as_durations_or_seconds_mixed() -> None:
    settings = ReminderSettings.from_env({VARIABLE: "6h, 90m,30"})
    assert settings.invoice_reminders_s == (21_600.0, 5400.0, 30.0)
    assert ReminderSettings.from_env({VARIABLE: "21600,10800,3600"}).invoice_reminders_s == (
        21_600.0, 10_800.0, 3600.0)


@pytest.mark.parametrize(("text", "why"), [
    ("6x", "not a duration"), ("1.5", "whole number of seconds"),
    ("0,1h", "whole number of seconds"), ("1h,3600", "given twice")])
def test_a_bad_chain_refuses_to_start_naming_the_variable(text: str, why: str) -> None:
    with pytest.raises(SettingsError, match=why) as raised:
        ReminderSettings.from_env({VARIABLE: text})
    assert VARIABLE in str(raised.value)


def test_the_window_stays_wider_than_the_period() -> None:
    with pytest.raises(SettingsError, match="wider"):
        ReminderSettings.from_env({"PAYSTREAM_REMIND_PERIOD_S": "2",
                                   "PAYSTREAM_REMIND_WINDOW_S": "2", VARIABLE: "20,10"})


def test_the_key_names_invoice_deadline_and_offset() -> None:
    deadline = datetime(2026, 12, 5, 10, 0, 0, 750_000, tzinfo=UTC)
    epoch = 1_796_464_800
    assert invoice_key("inv_ab", deadline, 3600.0) == f"invoice_unpaid:inv_ab:{epoch}:3600"
    # An extended deadline: every step of the new cycle has a key of its own.
    later = invoice_key("inv_ab", deadline + timedelta(hours=1), 3600.0)
    assert later == f"invoice_unpaid:inv_ab:{epoch + 3600}:3600"


def test_a_scan_sweeps_for_skipped_steps_only_when_it_may_have_missed_one() -> None:
    settings = ReminderSettings.from_env({"PAYSTREAM_REMIND_PERIOD_S": "60",
                                          "PAYSTREAM_REMIND_WINDOW_S": "180"})
    assert must_sweep(None, 1000.0, settings)  # a process's first scan
    assert not must_sweep(1000.0, 1060.0, settings)  # the next period
    assert not must_sweep(1000.0, 1119.0, settings)  # a slow scan: still inside
    # A gap (the database down): a step may have left its window unclaimed.
    assert must_sweep(1000.0, 1120.0, settings)
    assert must_sweep(1000.0, 5000.0, settings)
