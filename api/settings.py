"""The merchant API's configuration: one frozen, validated object built from the
environment (`paystream api` exits 2 with the reason on a bad value)."""

from __future__ import annotations

from typing import ClassVar, Self

from pydantic import Field, model_validator

from paystream.env import SettingsError, Words
from paystream.schema.db import DbRole, RoleSettings
from paystream.schema.events import ASSET_PATTERN

# Every list the API answers is bounded by this (limit <= 500, docs/api.md).
MAX_LIMIT = 500


class ApiSettings(RoleSettings):
    """Read by `paystream api` ([api](api.md)). Limits are per worker process."""

    doc_section = "Merchant API"
    db_role: ClassVar[DbRole] = "api"

    port: int = Field(8100, alias="PAYSTREAM_API_PORT", ge=1, description=(
        "the public port (`/v1/*`, `/healthz`): the default of `paystream api --port` and "
        "`paystream run --api-port`"))
    # /docs, /openapi.json, /metrics, /readyz: loopback only unless told otherwise.
    admin_host: str = Field("127.0.0.1", alias="PAYSTREAM_API_ADMIN_HOST", description=(
        "the admin listener's address: `/metrics`, `/readyz`, `/docs`, `/openapi.json` "
        "(the public port answers those 404, the admin port `/v1/*` 404)"))
    admin_port: int = Field(8101, alias="PAYSTREAM_API_ADMIN_PORT", ge=1,
                            description="the admin listener's port, Prometheus' `api` target")
    # Token bucket per API key (paystream/rate_limit.py): sustained rate and burst.
    # Peers whose X-Forwarded-For names the client (the request log's address); none by
    # default, so a caller cannot pick the address it is logged under.
    trusted_proxies: Words = Field(
        (), alias="PAYSTREAM_API_TRUSTED_PROXIES",
        description="comma list of proxy IPs or CIDRs whose `X-Forwarded-For` names the "
                    "client; from anyone else the header is ignored")
    rate_per_second: float = Field(100.0, alias="PAYSTREAM_API_RATE_PER_SECOND", gt=0,
                                   description="sustained rate of the token bucket per API "
                                               "key (429 with `Retry-After` when empty)")
    rate_burst: int = Field(200, alias="PAYSTREAM_API_RATE_BURST", ge=1,
                            description="burst size of that bucket")
    key_use_flush_s: float = Field(60.0, alias="PAYSTREAM_API_KEY_USE_FLUSH_S", gt=0,
                                   le=3600, description=(
        "how often the keys' last_used_at is written (what `apikeys list` shows is at "
        "most this old)"))
    # Database threads, each with its own connection to Postgres, one per request in
    # flight: requests beyond them wait up to db_wait_s for one, then get 503 (a slow
    # database must not queue work unboundedly).
    db_pool_size: int = Field(8, alias="PAYSTREAM_API_DB_POOL_SIZE", ge=1, description=(
        "database threads, each with its own connection (so connections at most, per worker "
        "process); a request waits for one up to `PAYSTREAM_API_DB_WAIT_S` "
        "(`bench/api_baseline.py` takes the same number)"))
    db_wait_s: float = Field(2.0, alias="PAYSTREAM_API_DB_WAIT_S", gt=0,
                             description="then answers 503 with `Retry-After`")
    db_statement_timeout_ms: int = Field(
        2000, alias="PAYSTREAM_API_DB_STATEMENT_TIMEOUT_MS", ge=1,
        description="statement timeout, set with `SET LOCAL` in each transaction "
                    "(PgBouncer-safe)")
    db_connect_timeout_s: int = Field(2, alias="PAYSTREAM_API_DB_CONNECT_TIMEOUT_S", ge=1,
                                      description="connect timeout")
    retry_after_s: int = Field(2, alias="PAYSTREAM_API_RETRY_AFTER_S", ge=1,
                               description="`Retry-After` of a 503")
    # The gateway (provider) that pays requested withdrawals out and later settles or
    # fails them: the hold is its (consumers/ledger/plan.py refuses another's settle).
    withdrawal_provider: str = Field(
        "payments", alias="PAYSTREAM_API_WITHDRAWAL_PROVIDER",
        description="the gateway a requested withdrawal's hold belongs to: the one that "
                    "settles or fails it (the ledger refuses another provider's)")
    withdrawal_assets: Words = Field(
        ("USD",), alias="PAYSTREAM_API_WITHDRAWAL_ASSETS",
        description="the assets a withdrawal may be requested in, comma-separated (the "
                    "gateway's, `PAYMENTS_ASSETS`)")

    @model_validator(mode="after")
    def _known_assets(self) -> Self:
        if not self.withdrawal_assets:
            raise SettingsError("PAYSTREAM_API_WITHDRAWAL_ASSETS names no asset")
        for asset in self.withdrawal_assets:
            if ASSET_PATTERN.fullmatch(asset) is None:
                raise SettingsError(f"PAYSTREAM_API_WITHDRAWAL_ASSETS: {asset!r} is not an"
                                    " asset code")
        return self
