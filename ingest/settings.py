"""The ingest's configuration: one frozen, validated object built from the environment,
with the settings of every provider it serves (ingest/registry.py: each provider's own
class, declared in its module of ingest/providers/).

What a provider's settings share is here: its webhook secrets, refused at start when
missing or weak (`require_strong`): a short key makes forged webhooks, and so forged
money, cheap to produce.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Annotated, ClassVar, Self

from pydantic import BeforeValidator, Field, SkipValidation
from pydantic_settings import NoDecode

# SettingsError: a configuration the ingest must not run with (`paystream ingest` exits 2).
from paystream.env import EnvSettings, SettingsError, UnshownValueError, Words, variable_name, words
from paystream.ingest import registry
from paystream.schema.db import DbRole, RoleSettings

MIN_SECRET_BYTES = 32
STANDARD_WEBHOOKS_PREFIX = "whsec_"


def decode_standard_secret(text: str) -> bytes:
    """A Standard Webhooks secret `whsec_<base64>` (the prefix is optional) as raw bytes."""
    body = text.removeprefix(STANDARD_WEBHOOKS_PREFIX)
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise UnshownValueError("must be whsec_ followed by base64") from None


def _keys(value: object) -> object:
    # Several keys, separated by spaces or commas, during a rotation.
    return tuple(k.encode("utf-8") for k in words(value)) if isinstance(value, str) else value


def _secrets(value: object) -> object:
    return (tuple(decode_standard_secret(s) for s in words(value)) if isinstance(value, str)
            else value)


# A provider's secrets field: HMAC keys as their UTF-8 bytes, or Standard Webhooks
# secrets decoded; several during a rotation (any one of them may have signed).
Keys = Annotated[tuple[bytes, ...], NoDecode, BeforeValidator(_keys)]
StandardSecrets = Annotated[tuple[bytes, ...], NoDecode, BeforeValidator(_secrets)]


def require_strong(settings: EnvSettings, *fields: str) -> None:
    """Refuse to start (SettingsError, naming the variable) unless each secrets field of
    `fields` holds one secret at least, each of MIN_SECRET_BYTES at least."""
    for field in fields:
        name, keys = variable_name(type(settings), field), getattr(settings, field)
        if not keys:
            raise SettingsError(f"{name} is required")
        for key in keys:
            if len(key) < MIN_SECRET_BYTES:
                raise SettingsError(
                    f"{name} is {len(key)} bytes after decoding; at least "
                    f"{MIN_SECRET_BYTES} are required: refusing to start")


class IngestSettings(RoleSettings):
    """Read by `paystream ingest` ([ingest](ingest.md)). Limits are per worker process.
    Each provider's own settings follow (its secrets and what its parser needs): webhook
    secrets the ingest refuses (missing, too short, not base64) stop it at start with
    exit code 2 and the reason. `make run` generates development secrets once into
    `.stack/dev-secrets.env` unless they are set in the environment."""

    doc_section = "Ingest"
    db_role: ClassVar[DbRole] = "ingest"

    # Not a variable: every provider served, with its own settings (ingest/registry.py),
    # read by from_env.
    providers: Annotated[tuple[registry.Served, ...], SkipValidation] = Field(
        (), repr=False)
    max_body_bytes: int = Field(1024 * 1024, alias="PAYSTREAM_INGEST_MAX_BODY_BYTES",
                                ge=1024, description="body size limit (413 above it)")
    # Token bucket per (provider, source address): sustained rate and burst size.
    rate_per_second: float = Field(
        1000.0, alias="PAYSTREAM_INGEST_RATE_PER_SECOND", gt=0,
        description="sustained rate of the token bucket per provider, charged by verified "
                    "deliveries only")
    rate_burst: int = Field(2000, alias="PAYSTREAM_INGEST_RATE_BURST", ge=1,
                            description="burst size of that bucket")
    # Failed authentication (and anything refused before it) charges this bucket per
    # source; a verified delivery charges its provider's bucket (rate_per_second above).
    auth_failure_rate_per_second: float = Field(
        1.0, alias="PAYSTREAM_INGEST_AUTH_FAILURE_RATE_PER_SECOND", gt=0,
        description="refill rate of the bucket per source address that every request "
                    "refused before or at the signature check spends from; empty: 429 "
                    "before the body is read")
    auth_failure_burst: int = Field(20, alias="PAYSTREAM_INGEST_AUTH_FAILURE_BURST", ge=1,
                                    description="burst size of that bucket")
    # Peers (IPs or CIDRs) whose X-Forwarded-For names the client; none by default, so
    # a sender cannot pick the address its rate limit is charged to.
    trusted_proxies: Words = Field(
        (), alias="PAYSTREAM_INGEST_TRUSTED_PROXIES",
        description="comma list of proxy IPs or CIDRs whose `X-Forwarded-For` names the "
                    "client; from anyone else the header is ignored")
    # The HTTP edge (ingest/http_edge.py, ingest/serve.py): the public port's limits.
    # A provider's request head is ~1 KiB and ~10 headers; nginx's default is 8 KiB.
    max_header_bytes: int = Field(16 * 1024, alias="PAYSTREAM_INGEST_MAX_HEADER_BYTES",
                                  ge=1024, description="request line and headers at most "
                                                       "(431 above it)")
    max_headers: int = Field(100, alias="PAYSTREAM_INGEST_MAX_HEADERS", ge=8,
                             description="request headers at most (431 above it)")
    header_timeout_s: float = Field(
        10.0, alias="PAYSTREAM_INGEST_HEADER_TIMEOUT_S", gt=0,
        description="a request head must be complete this long after the connection opened "
                    "or the previous answer (408, or closed if nothing came)")
    body_timeout_s: float = Field(
        10.0, alias="PAYSTREAM_INGEST_BODY_TIMEOUT_S", gt=0,
        description="a webhook body must be complete this long after its head (408, "
                    "connection closed)")
    max_connections: int = Field(
        1000, alias="PAYSTREAM_INGEST_MAX_CONNECTIONS", ge=1,
        description="open public connections per worker; a request on one more is answered "
                    "503 with `Retry-After` and the connection closed")
    # Metrics, /docs, /openapi.json and /readyz: loopback only unless told otherwise.
    admin_host: str = Field(
        "127.0.0.1", alias="PAYSTREAM_INGEST_ADMIN_HOST",
        description="the admin listener's address: `/metrics`, `/readyz`, `/docs`, "
                    "`/openapi.json` (the public port answers those 404)")
    admin_port: int = Field(8001, alias="PAYSTREAM_INGEST_ADMIN_PORT", ge=1,
                            description="the admin listener's port")
    # Standard Webhooks reference libraries reject timestamps more than 5 min away.
    timestamp_tolerance_s: int = Field(
        300, alias="PAYSTREAM_INGEST_TIMESTAMP_TOLERANCE_S", ge=1,
        description="how far `webhook-timestamp` may be from now")
    # Group commit (ingest/writer.py): writer threads, one connection each; at most
    # `commit_batch_max` deliveries per transaction; how long a free writer waits for
    # more (0: take what is queued, no added latency when traffic is light).
    db_writers: int = Field(2, alias="PAYSTREAM_INGEST_DB_WRITERS", ge=1,
                            description="group-commit writer threads, one connection each "
                                        "(4 measured no better on 2 cores)")
    commit_batch_max: int = Field(128, alias="PAYSTREAM_INGEST_COMMIT_BATCH_MAX", ge=1,
                                  description="deliveries per transaction at most")
    # Beyond a second: an outage, not a batch.
    commit_linger_ms: float = Field(0.0, alias="PAYSTREAM_INGEST_COMMIT_LINGER_MS", ge=0,
                                    le=1000, description="added wait for more deliveries "
                                                         "before a commit")
    # Bounded DB waits keep every answer well inside Alchemy's 5 s delivery timeout.
    db_statement_timeout_ms: int = Field(
        2000, alias="PAYSTREAM_INGEST_DB_STATEMENT_TIMEOUT_MS", ge=1,
        description="statement timeout (keeps answers inside Alchemy's 5 s delivery "
                    "timeout)")
    db_connect_timeout_s: int = Field(2, alias="PAYSTREAM_INGEST_DB_CONNECT_TIMEOUT_S",
                                      ge=1, description="connect timeout")
    retry_after_s: int = Field(5, alias="PAYSTREAM_INGEST_RETRY_AFTER_S", ge=1,
                               description="`Retry-After` of a 503")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None,
                 overrides: Mapping[str, object] | None = None, *,
                 also: Sequence[str] = ()) -> Self:
        """The ingest's settings and every provider's (ingest/registry.py: those of
        ingest/providers/ and of the packages `also` names, a test's own), from `env`
        (default: os.environ)."""
        return super().from_env(env, {"providers": registry.served(env, also),
                                      **(overrides or {})})
