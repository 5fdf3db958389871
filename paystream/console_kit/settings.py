"""The operator console's configuration: one frozen, validated object built from the
environment (`paystream console` exits 2 with the reason on a bad value)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from paystream.env import Words
from paystream.schema.db import DbRole, RoleSettings


class ConsoleSettings(RoleSettings):
    """Read by `paystream console` ([console](console.md)). It connects as the operator,
    `paystream_ops`."""

    doc_section = "Operator console"
    db_role: ClassVar[DbRole] = "ops"

    host: str = Field("127.0.0.1", alias="PAYSTREAM_CONSOLE_HOST", description=(
        "the listener's address: loopback unless a person decides otherwise; the default "
        "of `paystream console --host`"))
    port: int = Field(8102, alias="PAYSTREAM_CONSOLE_PORT", ge=1, description=(
        "its port, the default of `paystream console --port` and `paystream run "
        "--console-port`"))
    # Requests naming another Host are refused (400): a page elsewhere whose name
    # resolves to the loopback (DNS rebinding) cannot reach the console.
    allowed_hosts: Words = Field(("127.0.0.1", "localhost"),
                                 alias="PAYSTREAM_CONSOLE_ALLOWED_HOSTS", description=(
        "the host names a request may address (comma-separated; the port is not part "
        "of it)"))
    # Peers whose X-Forwarded-For names the client, the failed-login limit's key; none by
    # default: the console is on loopback, where uvicorn would otherwise believe anyone.
    trusted_proxies: Words = Field(
        (), alias="PAYSTREAM_CONSOLE_TRUSTED_PROXIES",
        description="comma list of proxy IPs or CIDRs whose `X-Forwarded-For` names the "
                    "client (a TLS terminator in front of the console); from anyone else "
                    "the header is ignored")
    # A key is 256 random bits: the limit bounds the audit rows and the work of a flood,
    # not guessing. A person who mistypes ten times waits a minute per further try.
    login_failure_burst: int = Field(10, alias="PAYSTREAM_CONSOLE_LOGIN_FAILURE_BURST", ge=1,
                                     description=(
        "failed logins one client address may make before it is limited"))
    login_failures_per_minute: float = Field(
        1.0, alias="PAYSTREAM_CONSOLE_LOGIN_FAILURES_PER_MINUTE", gt=0, le=600,
        description="then one more failed login per 60/N seconds (the bucket's refill)")
    session_ttl_s: float = Field(8 * 3600.0, alias="PAYSTREAM_CONSOLE_SESSION_TTL_S",
                                 gt=0, description=(
        "a login lasts this long, then the operator logs in again"))
    # Behind a TLS terminator the cookie must not travel in clear: set it. Over plain
    # HTTP a browser would not send a Secure cookie back (except to localhost).
    secure_cookie: bool = Field(False, alias="PAYSTREAM_CONSOLE_SECURE_COOKIE", description=(
        "mark the session cookie `Secure` (when the console is served over HTTPS)"))
    db_statement_timeout_ms: int = Field(
        5000, alias="PAYSTREAM_CONSOLE_DB_STATEMENT_TIMEOUT_MS", ge=1,
        description="statement timeout of each page's transaction")
    bulk_replay_limit: int = Field(1000, alias="PAYSTREAM_CONSOLE_BULK_REPLAY_LIMIT", ge=1,
                                   description="most dead letters one bulk replay sends")
