"""The merchant API's configuration: one frozen, validated object built from the
environment (`paystream api` exits 2 with the reason on a bad value)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from paystream.env import SettingsError, env_float, env_int, env_str
from paystream.schema.db import database_url
from paystream.schema.events import ASSET_PATTERN

# Every list the API answers is bounded by this (limit <= 500, docs/api.md).
MAX_LIMIT = 500


@dataclass(frozen=True)
class ApiSettings:
    database_url: str = ""
    # Database threads, each with its own connection to Postgres, one per request in
    # flight: requests beyond them wait up to db_wait_s for one, then get 503 (a slow
    # database must not queue work unboundedly).
    db_pool_size: int = 8
    db_wait_s: float = 2.0
    db_connect_timeout_s: int = 2
    db_statement_timeout_ms: int = 2000  # SET LOCAL per transaction (PgBouncer-safe)
    retry_after_s: int = 2
    # Token bucket per API key (paystream/rate_limit.py): sustained rate and burst.
    rate_per_second: float = 100.0
    rate_burst: int = 200
    # The gateway (provider) that pays requested withdrawals out and later settles or
    # fails them: the hold is its (consumers/ledger/plan.py refuses another's settle).
    withdrawal_provider: str = "payments"
    withdrawal_assets: tuple[str, ...] = ("USD",)
    # /docs, /openapi.json, /metrics, /readyz: loopback only unless told otherwise.
    admin_host: str = "127.0.0.1"
    admin_port: int = 8101

    def __post_init__(self) -> None:
        for name, value, low in (("PAYSTREAM_API_DB_POOL_SIZE", self.db_pool_size, 1),
                                 ("PAYSTREAM_API_DB_CONNECT_TIMEOUT_S",
                                  self.db_connect_timeout_s, 1),
                                 ("PAYSTREAM_API_DB_STATEMENT_TIMEOUT_MS",
                                  self.db_statement_timeout_ms, 1),
                                 ("PAYSTREAM_API_RETRY_AFTER_S", self.retry_after_s, 1),
                                 ("PAYSTREAM_API_RATE_BURST", self.rate_burst, 1),
                                 ("PAYSTREAM_API_ADMIN_PORT", self.admin_port, 1)):
            if value < low:
                raise SettingsError(f"{name} must be at least {low}, got {value}")
        for name, seconds in (("PAYSTREAM_API_DB_WAIT_S", self.db_wait_s),
                              ("PAYSTREAM_API_RATE_PER_SECOND", self.rate_per_second)):
            if not seconds > 0:
                raise SettingsError(f"{name} must be positive, got {seconds}")
        if not self.withdrawal_assets:
            raise SettingsError("PAYSTREAM_API_WITHDRAWAL_ASSETS names no asset")
        for asset in self.withdrawal_assets:
            if ASSET_PATTERN.fullmatch(asset) is None:
                raise SettingsError(f"PAYSTREAM_API_WITHDRAWAL_ASSETS: {asset!r} is not an"
                                    " asset code")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiSettings:
        env = os.environ if env is None else env
        assets = env_str("PAYSTREAM_API_WITHDRAWAL_ASSETS", "USD", env)
        return cls(
            database_url=database_url("api", env),
            db_pool_size=env_int("PAYSTREAM_API_DB_POOL_SIZE", 8, env),
            db_wait_s=env_float("PAYSTREAM_API_DB_WAIT_S", 2.0, env),
            db_connect_timeout_s=env_int("PAYSTREAM_API_DB_CONNECT_TIMEOUT_S", 2, env),
            db_statement_timeout_ms=env_int("PAYSTREAM_API_DB_STATEMENT_TIMEOUT_MS", 2000,
                                            env),
            retry_after_s=env_int("PAYSTREAM_API_RETRY_AFTER_S", 2, env),
            rate_per_second=env_float("PAYSTREAM_API_RATE_PER_SECOND", 100.0, env),
            rate_burst=env_int("PAYSTREAM_API_RATE_BURST", 200, env),
            withdrawal_provider=env_str("PAYSTREAM_API_WITHDRAWAL_PROVIDER", "payments", env),
            withdrawal_assets=tuple(a for a in assets.replace(",", " ").split() if a),
            admin_host=env_str("PAYSTREAM_API_ADMIN_HOST", "127.0.0.1", env),
            admin_port=env_int("PAYSTREAM_API_ADMIN_PORT", 8101, env),
        )
