"""The trace id of a request: X-Request-ID, else the provider's delivery id, else new.

It is returned to the caller (header and body), stored on the event and the outbox row,
travels in the Kafka headers, and is bound to every log line of the request.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

import structlog

REQUEST_ID_HEADER = "x-request-id"
TRACE_ID_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


@dataclass
class Trace:
    trace_id: str
    from_caller: bool  # True when it came from a header; a delivery id must not replace it

    def adopt_delivery_id(self, delivery_id: object) -> None:
        """Use the provider's delivery id found in the body, unless the caller chose one."""
        if not self.from_caller and valid(delivery_id):
            assert isinstance(delivery_id, str)
            self.trace_id = delivery_id
            self.from_caller = True
            structlog.contextvars.bind_contextvars(trace_id=delivery_id)


def valid(value: object) -> bool:
    return isinstance(value, str) and TRACE_ID_PATTERN.fullmatch(value) is not None


def from_headers(request_id: str | None, delivery_id: str | None) -> Trace:
    for candidate in (request_id, delivery_id):
        if valid(candidate):
            assert candidate is not None
            return Trace(candidate, True)
    # 128 random bits as 32 hex digits, as uuid4().hex spelled it at a quarter of its cost
    # (the API and the ingest make one per request).
    return Trace(secrets.token_hex(16), False)
