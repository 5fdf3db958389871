"""The ingest's configuration: one frozen, validated object built from the environment.

A process that would run with a weak or missing webhook secret refuses to start: a
short key makes forged webhooks, and so forged money, cheap to produce.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

# SettingsError: a configuration the ingest must not run with (`paystream ingest` exits 2).
from paystream.env import SettingsError, env_float, env_int, env_str
from paystream.schema.db import database_url
from paystream.schema.events import ASSET_PATTERN

MIN_SECRET_BYTES = 32
STANDARD_WEBHOOKS_PREFIX = "whsec_"


@dataclass(frozen=True)
class IngestSettings:
    # HMAC keys, several during a rotation (any one of them may have signed a request).
    alchemy_signing_keys: tuple[bytes, ...]
    payments_secrets: tuple[bytes, ...]
    payments_default_asset: str = "USD"
    # The only assets the gateway may credit. Chain assets ("NETWORK:...") never: they
    # come from chain providers and are spendable only once final.
    payments_assets: tuple[str, ...] = ("USD",)
    database_url: str = ""
    max_body_bytes: int = 1024 * 1024
    # Standard Webhooks reference libraries reject timestamps more than 5 min away.
    timestamp_tolerance_s: int = 300
    # Token bucket per (provider, source address): sustained rate and burst size.
    rate_per_second: float = 1000.0
    rate_burst: int = 2000
    # Group commit (ingest/writer.py): writer threads, one connection each; at most
    # `commit_batch_max` deliveries per transaction; how long a free writer waits for
    # more (0: take what is queued, no added latency when traffic is light).
    db_writers: int = 2
    commit_batch_max: int = 128
    commit_linger_ms: float = 0.0
    # Bounded DB waits keep every answer well inside Alchemy's 5 s delivery timeout.
    db_connect_timeout_s: int = 2
    db_statement_timeout_ms: int = 2000
    retry_after_s: int = 5
    # The HTTP edge (ingest/http_edge.py, ingest/serve.py): the public port's limits.
    # A provider's request head is ~1 KiB and ~10 headers; nginx's default is 8 KiB.
    max_header_bytes: int = 16 * 1024
    max_headers: int = 100
    header_timeout_s: float = 10.0  # a request head must arrive whole within this
    body_timeout_s: float = 10.0  # ... and its body within this of the head (else 408)
    max_connections: int = 1000  # per worker; more are answered 503 with Retry-After
    # Peers (IPs or CIDRs) whose X-Forwarded-For names the client; none by default, so
    # a sender cannot pick the address its rate limit is charged to.
    trusted_proxies: tuple[str, ...] = ()
    # Failed authentication (and anything refused before it) charges this bucket per
    # source; a verified delivery charges its provider's bucket (rate_per_second above).
    auth_failure_rate_per_second: float = 1.0
    auth_failure_burst: int = 20
    # Metrics, /docs, /openapi.json and /readyz: loopback only unless told otherwise.
    admin_host: str = "127.0.0.1"
    admin_port: int = 8001

    def __post_init__(self) -> None:
        if not self.alchemy_signing_keys:
            raise SettingsError("ALCHEMY_SIGNING_KEY is required")
        if not self.payments_secrets:
            raise SettingsError("PAYMENTS_WEBHOOK_SECRET is required")
        for name, keys in (("ALCHEMY_SIGNING_KEY", self.alchemy_signing_keys),
                           ("PAYMENTS_WEBHOOK_SECRET", self.payments_secrets)):
            for key in keys:
                if len(key) < MIN_SECRET_BYTES:
                    raise SettingsError(
                        f"{name} is {len(key)} bytes after decoding; at least "
                        f"{MIN_SECRET_BYTES} are required: refusing to start"
                    )
        if ASSET_PATTERN.fullmatch(self.payments_default_asset) is None:
            raise SettingsError(f"PAYMENTS_DEFAULT_ASSET is not a valid asset code: "
                                f"{self.payments_default_asset!r}")
        if not self.payments_assets:
            raise SettingsError("PAYMENTS_ASSETS names no asset")
        for asset in self.payments_assets:
            if ASSET_PATTERN.fullmatch(asset) is None or ":" in asset:
                raise SettingsError(f"PAYMENTS_ASSETS: {asset!r} is not a gateway asset code"
                                    " (chain assets, NETWORK:..., are never allowed)")
        if self.payments_default_asset not in self.payments_assets:
            raise SettingsError(f"PAYMENTS_DEFAULT_ASSET {self.payments_default_asset!r} is "
                                f"not in PAYMENTS_ASSETS {','.join(self.payments_assets)}")
        for name, value, low in (("max_body_bytes", self.max_body_bytes, 1024),
                                 ("timestamp_tolerance_s", self.timestamp_tolerance_s, 1),
                                 ("rate_burst", self.rate_burst, 1),
                                 ("db_writers", self.db_writers, 1),
                                 ("commit_batch_max", self.commit_batch_max, 1),
                                 ("db_connect_timeout_s", self.db_connect_timeout_s, 1),
                                 ("db_statement_timeout_ms", self.db_statement_timeout_ms, 1),
                                 ("retry_after_s", self.retry_after_s, 1),
                                 ("max_header_bytes", self.max_header_bytes, 1024),
                                 ("max_headers", self.max_headers, 8),
                                 ("max_connections", self.max_connections, 1),
                                 ("auth_failure_burst", self.auth_failure_burst, 1),
                                 ("admin_port", self.admin_port, 1)):
            if value < low:
                raise SettingsError(f"{name} must be at least {low}, got {value}")
        if not 0 <= self.commit_linger_ms <= 1000:  # beyond that: an outage, not a batch
            raise SettingsError(f"commit_linger_ms must be within 0..1000, "
                                f"got {self.commit_linger_ms}")
        for name, seconds in (("header_timeout_s", self.header_timeout_s),
                              ("body_timeout_s", self.body_timeout_s),
                              ("auth_failure_rate_per_second",
                               self.auth_failure_rate_per_second)):
            if not seconds > 0:
                raise SettingsError(f"{name} must be positive, got {seconds}")
        if not self.rate_per_second > 0:
            raise SettingsError(f"rate_per_second must be positive, got {self.rate_per_second}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> IngestSettings:
        env = os.environ if env is None else env
        return cls(
            alchemy_signing_keys=tuple(
                k.encode("utf-8") for k in _split(env_str("ALCHEMY_SIGNING_KEY", "", env))
            ),
            payments_secrets=tuple(
                decode_standard_secret(s)
                for s in _split(env_str("PAYMENTS_WEBHOOK_SECRET", "", env))
            ),
            payments_default_asset=env_str("PAYMENTS_DEFAULT_ASSET", "USD", env),
            payments_assets=tuple(_split(env_str("PAYMENTS_ASSETS", "USD", env))),
            database_url=database_url("ingest", env),
            max_body_bytes=env_int("PAYSTREAM_INGEST_MAX_BODY_BYTES", 1024 * 1024, env),
            timestamp_tolerance_s=env_int("PAYSTREAM_INGEST_TIMESTAMP_TOLERANCE_S", 300, env),
            rate_per_second=env_float("PAYSTREAM_INGEST_RATE_PER_SECOND", 1000.0, env),
            rate_burst=env_int("PAYSTREAM_INGEST_RATE_BURST", 2000, env),
            db_writers=env_int("PAYSTREAM_INGEST_DB_WRITERS", 2, env),
            commit_batch_max=env_int("PAYSTREAM_INGEST_COMMIT_BATCH_MAX", 128, env),
            commit_linger_ms=env_float("PAYSTREAM_INGEST_COMMIT_LINGER_MS", 0.0, env),
            db_connect_timeout_s=env_int("PAYSTREAM_INGEST_DB_CONNECT_TIMEOUT_S", 2, env),
            db_statement_timeout_ms=env_int("PAYSTREAM_INGEST_DB_STATEMENT_TIMEOUT_MS", 2000,
                                            env),
            retry_after_s=env_int("PAYSTREAM_INGEST_RETRY_AFTER_S", 5, env),
            max_header_bytes=env_int("PAYSTREAM_INGEST_MAX_HEADER_BYTES", 16 * 1024, env),
            max_headers=env_int("PAYSTREAM_INGEST_MAX_HEADERS", 100, env),
            header_timeout_s=env_float("PAYSTREAM_INGEST_HEADER_TIMEOUT_S", 10.0, env),
            body_timeout_s=env_float("PAYSTREAM_INGEST_BODY_TIMEOUT_S", 10.0, env),
            max_connections=env_int("PAYSTREAM_INGEST_MAX_CONNECTIONS", 1000, env),
            trusted_proxies=tuple(_split(env_str("PAYSTREAM_INGEST_TRUSTED_PROXIES", "",
                                                 env))),
            auth_failure_rate_per_second=env_float(
                "PAYSTREAM_INGEST_AUTH_FAILURE_RATE_PER_SECOND", 1.0, env),
            auth_failure_burst=env_int("PAYSTREAM_INGEST_AUTH_FAILURE_BURST", 20, env),
            admin_host=env_str("PAYSTREAM_INGEST_ADMIN_HOST", "127.0.0.1", env),
            admin_port=env_int("PAYSTREAM_INGEST_ADMIN_PORT", 8001, env),
        )


def decode_standard_secret(text: str) -> bytes:
    """A Standard Webhooks secret `whsec_<base64>` (the prefix is optional) as raw bytes."""
    body = text.removeprefix(STANDARD_WEBHOOKS_PREFIX)
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise SettingsError("PAYMENTS_WEBHOOK_SECRET must be whsec_ followed by base64") \
            from None


def _split(value: str) -> list[str]:
    # Several secrets, separated by spaces or commas, during a rotation.
    return [part for part in re.split(r"[\s,]+", value.strip()) if part]
