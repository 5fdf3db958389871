"""The sender's settings: one frozen, validated object (every variable in
docs/configuration.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from paystream.env import SettingsError, env_float, env_int, env_str

# Svix's schedule: at once, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h (about 28 h in
# all). Entry k is the wait after the k-th failed attempt; past the last, the slot fails.
DEFAULT_RETRY_DELAYS_S = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)


@dataclass(frozen=True)
class NotifySettings:
    retry_delays_s: tuple[float, ...] = DEFAULT_RETRY_DELAYS_S
    # Each wait is stretched or shrunk by up to this fraction, at random, so endpoints
    # that failed together are not all retried in the same instant.
    jitter: float = 0.2
    # The whole attempt (connect, send, the answer's status line) must end within it.
    timeout_s: float = 10.0
    # A claim's lease. Longer than an attempt, with margin: a live sender always records
    # before its lease lapses, so only a dead sender's claim is taken over.
    lease_s: float = 60.0
    # Attempts in flight to one endpoint at most: a slow endpoint uses up its own slots
    # and no one else's.
    per_endpoint: int = 16
    # Attempts in flight in all.
    max_in_flight: int = 512
    # How often an idle sender looks for due slots.
    poll_s: float = 0.2
    # An endpoint failing (no 2xx) for this long is disabled.
    disable_after_s: float = 5 * 86_400.0
    # After rotate-secret, the old secret also signs for this long.
    rotation_overlap_s: float = 86_400.0

    def __post_init__(self) -> None:
        if any(d < 0 for d in self.retry_delays_s):
            raise SettingsError("PAYSTREAM_NOTIFY_RETRY_DELAYS_S: delays must be >= 0")
        if not 0 <= self.jitter < 1:
            raise SettingsError("PAYSTREAM_NOTIFY_JITTER must be in [0, 1)")
        if self.timeout_s <= 0 or self.lease_s < 2 * self.timeout_s:
            raise SettingsError("PAYSTREAM_NOTIFY_LEASE_S must be at least twice "
                                "PAYSTREAM_NOTIFY_TIMEOUT_S (a live sender records before "
                                f"its lease lapses); got {self.lease_s} and {self.timeout_s}")
        if self.per_endpoint < 1 or self.max_in_flight < self.per_endpoint:
            raise SettingsError("PAYSTREAM_NOTIFY_PER_ENDPOINT must be >= 1 and at most "
                                "PAYSTREAM_NOTIFY_MAX_IN_FLIGHT")
        if self.poll_s <= 0 or self.disable_after_s <= 0 or self.rotation_overlap_s < 0:
            raise SettingsError("PAYSTREAM_NOTIFY_POLL_S and PAYSTREAM_NOTIFY_DISABLE_AFTER_S"
                                " must be > 0, PAYSTREAM_NOTIFY_ROTATION_OVERLAP_S >= 0")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> NotifySettings:
        delays = _seconds_list("PAYSTREAM_NOTIFY_RETRY_DELAYS_S",
                               env_str("PAYSTREAM_NOTIFY_RETRY_DELAYS_S", None, environ),
                               DEFAULT_RETRY_DELAYS_S)
        return cls(
            retry_delays_s=delays,
            jitter=env_float("PAYSTREAM_NOTIFY_JITTER", 0.2, environ),
            timeout_s=env_float("PAYSTREAM_NOTIFY_TIMEOUT_S", 10.0, environ),
            lease_s=env_float("PAYSTREAM_NOTIFY_LEASE_S", 60.0, environ),
            per_endpoint=env_int("PAYSTREAM_NOTIFY_PER_ENDPOINT", 16, environ),
            max_in_flight=env_int("PAYSTREAM_NOTIFY_MAX_IN_FLIGHT", 512, environ),
            poll_s=env_float("PAYSTREAM_NOTIFY_POLL_S", 0.2, environ),
            disable_after_s=env_float("PAYSTREAM_NOTIFY_DISABLE_AFTER_S", 5 * 86_400.0,
                                      environ),
            rotation_overlap_s=env_float("PAYSTREAM_NOTIFY_ROTATION_OVERLAP_S", 86_400.0,
                                         environ),
        )


def _seconds_list(name: str, raw: str | None, default: tuple[float, ...]) -> tuple[float, ...]:
    if raw is None:
        return default
    try:
        return tuple(float(x) for x in raw.split(",") if x.strip())
    except ValueError:
        raise SettingsError(f"{name} must be seconds separated by commas, got {raw!r}") from None


@dataclass(frozen=True)
class ReminderSettings:
    # How often the scheduler looks for due reminders.
    period_s: float = 60.0
    # A reminder is due during this long after its moment. Wider than the period (three
    # periods by default), so a scan always falls inside it, across a restart too; past
    # it, a step nobody sent (the notifier was down) is skipped, never sent late.
    window_s: float = 180.0
    # An open shortfall is reminded this long after it opened, at each step.
    shortfall_after_s: tuple[float, ...] = (3600.0, 86_400.0, 259_200.0)
    # A chain deposit still waiting for finality this long after it was recorded.
    deposit_after_s: float = 3600.0
    # A hold this long before it expires.
    hold_before_s: float = 3600.0

    def __post_init__(self) -> None:
        if self.period_s <= 0 or self.window_s <= self.period_s:
            raise SettingsError("PAYSTREAM_REMIND_WINDOW_S must be wider than "
                                f"PAYSTREAM_REMIND_PERIOD_S (> 0): got {self.window_s} and "
                                f"{self.period_s}")
        if any(s <= 0 for s in (*self.shortfall_after_s, self.deposit_after_s,
                                self.hold_before_s)):
            raise SettingsError("PAYSTREAM_REMIND_*_S delays must be > 0")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ReminderSettings:
        period = env_float("PAYSTREAM_REMIND_PERIOD_S", 60.0, environ)
        return cls(
            period_s=period,
            window_s=env_float("PAYSTREAM_REMIND_WINDOW_S", 3 * period, environ),
            shortfall_after_s=_seconds_list(
                "PAYSTREAM_REMIND_SHORTFALL_AFTER_S",
                env_str("PAYSTREAM_REMIND_SHORTFALL_AFTER_S", None, environ),
                (3600.0, 86_400.0, 259_200.0)),
            deposit_after_s=env_float("PAYSTREAM_REMIND_DEPOSIT_AFTER_S", 3600.0, environ),
            hold_before_s=env_float("PAYSTREAM_REMIND_HOLD_BEFORE_S", 3600.0, environ),
        )
