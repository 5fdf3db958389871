"""The sender's and the reminder scheduler's settings: one frozen, validated object each
(every variable in docs/configuration.md)."""

from __future__ import annotations

import re
from typing import Annotated, Self

from pydantic import BeforeValidator, Field, model_validator
from pydantic_settings import NoDecode

from paystream.env import EnvSettings, SecondsList, SettingsError, Words
from paystream.notify.address_guard import AddressGuard

_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")


def parse_duration(text: str) -> float:
    """"90", "90s", "15m", "6h" or "2d" as seconds; ValueError saying what is accepted."""
    found = _DURATION.fullmatch(text.strip().lower())
    if found is None:
        raise ValueError("not a duration (seconds, or a number with s, m, h or d: 90, 15m,"
                         " 6h)")
    return float(found.group(1)) * _UNIT_S[found.group(2) or "s"]


def split_durations(value: object) -> object:
    """"6h,3h,1h" (or seconds, "21600,10800,3600") as (21600.0, 10800.0, 3600.0)."""
    if not isinstance(value, str):
        return value
    return tuple(parse_duration(part) for part in value.split(",") if part.strip())


# A list of durations: `6h,3h,1h` or seconds, split on commas (not decoded as JSON).
DurationList = Annotated[tuple[float, ...], NoDecode, BeforeValidator(split_durations)]

# Svix's schedule: at once, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h (about 28 h in
# all). Entry k is the wait after the k-th failed attempt; past the last, the slot fails.
DEFAULT_RETRY_DELAYS_S = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)


class NotifySettings(EnvSettings):
    """Read by the sender of `paystream consume notifier` and `paystream notify deliver`
    ([notifications](notifications.md)); a bad value refuses to start (exit 2)."""

    doc_section = "Notifications"

    retry_delays_s: SecondsList = Field(
        DEFAULT_RETRY_DELAYS_S, alias="PAYSTREAM_NOTIFY_RETRY_DELAYS_S",
        description="the wait after the 1st, 2nd, ... failed attempt, comma-separated "
                    "seconds, each ≥ 0 (Svix's schedule; the first attempt is at once); past "
                    "the last, the delivery fails for good. Tests shorten it")
    # Each wait is stretched or shrunk by up to this fraction, at random, so endpoints
    # that failed together are not all retried in the same instant.
    jitter: float = Field(0.2, alias="PAYSTREAM_NOTIFY_JITTER", ge=0, lt=1,
                          description="each wait stretched or shrunk at random by up to "
                                      "this fraction")
    # The whole attempt (connect, send, the answer's status line) must end within it.
    timeout_s: float = Field(10.0, alias="PAYSTREAM_NOTIFY_TIMEOUT_S", gt=0,
                             description="the longest one attempt may take, connect to "
                                         "status line")
    # A claim's lease. Longer than an attempt, with margin: a live sender always records
    # before its lease lapses, so only a dead sender's claim is taken over.
    lease_s: float = Field(60.0, alias="PAYSTREAM_NOTIFY_LEASE_S", gt=0,
                           description="a claim's lease; at least twice the timeout, so only "
                                       "a dead sender's claim is ever taken over")
    # Attempts in flight to one endpoint at most: a slow endpoint uses up its own slots
    # and no one else's.
    per_endpoint: int = Field(16, alias="PAYSTREAM_NOTIFY_PER_ENDPOINT", ge=1,
                              description="attempts in flight to one endpoint, per sender "
                                          "process")
    max_in_flight: int = Field(512, alias="PAYSTREAM_NOTIFY_MAX_IN_FLIGHT", ge=1,
                               description="attempts in flight in all, per sender process; "
                                           "at least `PAYSTREAM_NOTIFY_PER_ENDPOINT`")
    poll_s: float = Field(0.2, alias="PAYSTREAM_NOTIFY_POLL_S", gt=0,
                          description="how often an idle sender looks for due deliveries")
    disable_after_s: float = Field(
        5 * 86_400.0, alias="PAYSTREAM_NOTIFY_DISABLE_AFTER_S", gt=0,
        description="an endpoint answering nothing but failures for this long (5 days by "
                    "default) is disabled (`paystream_notify_endpoints_disabled_total`, an "
                    "`endpoint_disabled` error line)")
    rotation_overlap_s: float = Field(
        86_400.0, alias="PAYSTREAM_NOTIFY_ROTATION_OVERLAP_S", ge=0,
        description="after `endpoints rotate-secret`, the old secret also signs for this "
                    "long (`--overlap` overrides)")

    # The SSRF guard (notify/address_guard.py): every outbound POST, at creation and at
    # send time. Strict by default; local development and tests open loopback and http.
    allow_http: bool = Field(False, alias="PAYSTREAM_NOTIFY_ALLOW_HTTP",
                             description="admit plain http:// endpoints (development only; "
                                         "production endpoints are https)")
    allowed_cidrs: Words = Field(
        (), alias="PAYSTREAM_NOTIFY_ALLOWED_CIDRS",
        json_schema_extra={"shown": "none", "type": "list of CIDRs"},
        description="address ranges endpoints may reach although the SSRF guard refuses "
                    "them (loopback, private, link-local, CGNAT, ...), comma-separated, e.g. "
                    "`127.0.0.0/8` for a receiver on this machine")

    def guard(self) -> AddressGuard:
        return AddressGuard.of(self.allowed_cidrs, allow_http=self.allow_http)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        try:
            self.guard()
        except ValueError as exc:
            raise SettingsError(f"PAYSTREAM_NOTIFY_ALLOWED_CIDRS: {exc}") from None
        if any(d < 0 for d in self.retry_delays_s):
            raise SettingsError("PAYSTREAM_NOTIFY_RETRY_DELAYS_S: delays must be >= 0, got "
                                f"{','.join(f'{d:g}' for d in self.retry_delays_s)}")
        if self.lease_s < 2 * self.timeout_s:
            raise SettingsError("PAYSTREAM_NOTIFY_LEASE_S must be at least twice "
                                "PAYSTREAM_NOTIFY_TIMEOUT_S (a live sender records before "
                                f"its lease lapses); got {self.lease_s} and {self.timeout_s}")
        if self.max_in_flight < self.per_endpoint:
            raise SettingsError("PAYSTREAM_NOTIFY_PER_ENDPOINT must be at most "
                                f"PAYSTREAM_NOTIFY_MAX_IN_FLIGHT; got {self.per_endpoint} and "
                                f"{self.max_in_flight}")
        return self


class ReminderSettings(EnvSettings):
    """Read by the reminder scheduler (`paystream consume notifier`'s thread, or
    `paystream notify remind`)."""

    doc_section = "Notifications"

    period_s: float = Field(60.0, alias="PAYSTREAM_REMIND_PERIOD_S", gt=0,
                            description="how often the reminder scheduler scans")
    # Wider than the period (three periods by default), so a scan always falls inside
    # it, across a restart too; past it, a step nobody sent (the notifier was down) is
    # skipped, never sent late.
    window_s: float = Field(
        default_factory=lambda data: 3 * data.get("period_s", 60.0),
        alias="PAYSTREAM_REMIND_WINDOW_S", json_schema_extra={"shown": "3 × the period"},
        description="how long a reminder stays due after its moment; must be wider than "
                    "the period (a scan always lands inside; past it, a missed step is "
                    "skipped, never sent late)")
    shortfall_after_s: SecondsList = Field(
        (3600.0, 86_400.0, 259_200.0), alias="PAYSTREAM_REMIND_SHORTFALL_AFTER_S",
        description="an open shortfall is reminded this long after it opened, at each step")
    deposit_after_s: float = Field(
        3600.0, alias="PAYSTREAM_REMIND_DEPOSIT_AFTER_S", gt=0,
        description="a chain deposit still pending (or suspect) this long after it was "
                    "recorded is reminded")
    hold_before_s: float = Field(3600.0, alias="PAYSTREAM_REMIND_HOLD_BEFORE_S", gt=0,
                                 description="a held withdrawal is reminded this long "
                                             "before it expires")
    # Whole seconds: each is part of its reminder's key (`invoice_unpaid:<invoice>:
    # <deadline epoch s>:<offset s>`).
    invoice_reminders_s: DurationList = Field(
        (21_600.0, 10_800.0, 3600.0), alias="PAYSTREAM_INVOICE_REMINDERS",
        json_schema_extra={"shown": "`6h,3h,1h`", "type": "list of durations"},
        description="an unpaid invoice (state `new`) is reminded this long before its "
                    "deadline, at each step (`6h,3h,1h`, or seconds); only steps after the "
                    "invoice was created count")

    @model_validator(mode="after")
    def _window_wider_than_period(self) -> Self:
        if self.window_s <= self.period_s:
            raise SettingsError("PAYSTREAM_REMIND_WINDOW_S must be wider than "
                                f"PAYSTREAM_REMIND_PERIOD_S (> 0): got {self.window_s} and "
                                f"{self.period_s}")
        if any(s <= 0 for s in self.shortfall_after_s):
            raise SettingsError("PAYSTREAM_REMIND_SHORTFALL_AFTER_S delays must be > 0")
        if any(s < 1 or not s.is_integer() for s in self.invoice_reminders_s):
            raise SettingsError("PAYSTREAM_INVOICE_REMINDERS: each offset must be a whole "
                                "number of seconds, at least 1 s; got "
                                f"{','.join(f'{s:g}' for s in self.invoice_reminders_s)}")
        if len(set(self.invoice_reminders_s)) != len(self.invoice_reminders_s):
            raise SettingsError("PAYSTREAM_INVOICE_REMINDERS: an offset is given twice")
        return self
