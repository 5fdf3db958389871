"""Reading a webhook body: JSON only, bounded while it streams, parsed strictly.

The body is read chunk by chunk and refused as soon as it passes the limit, so a client
cannot make the process buffer an unbounded body. Parsing happens only after the
signature has been checked on the raw bytes.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.types import Receive, Scope

from paystream.ingest.errors import (
    BodyTimeoutError,
    BodyTooLargeError,
    MediaTypeError,
    PayloadError,
)

JSON_MEDIA_TYPE = "application/json"
# Set in a request's scope by the connection when its body is late (ingest/http_edge.py).
BODY_LATE_SCOPE_KEY = "paystream.body_late"
# Real payloads nest 6 levels at most. The C JSON scanner recurses once per level and
# can overflow the C stack (a segfault, not an exception) long before a 1 MiB body ends.
MAX_NESTING = 64
# One linear pass over the characters that matter: an escape pair (skipped, so an
# escaped quote does not end a string), a quote (enters or leaves a string), a bracket.
_STRUCTURE = re.compile(r'\\.|["\[\]{}]', re.DOTALL)


def require_json(content_type: str | None) -> None:
    """Raise MediaTypeError unless Content-Type is application/json (or a +json type)."""
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    if media_type != JSON_MEDIA_TYPE and not (
        media_type.startswith("application/") and media_type.endswith("+json")
    ):
        raise MediaTypeError(f"Content-Type must be {JSON_MEDIA_TYPE}, "
                             f"got {media_type or 'nothing'!r}")


async def read_bounded(scope: Scope, receive: Receive, content_length: str | None,
                       limit: int) -> bytes:
    """The raw body, or BodyTooLargeError as soon as more than `limit` bytes arrive, or
    BodyTimeoutError once the connection marked the body late (ingest/http_edge.py: a
    sender trickling a body must not hold a connection and a task as long as it likes).

    Reads the ASGI messages itself (what starlette's Request.stream does) so the webhook
    routes need no Request object.
    """
    if content_length is not None:
        if not content_length.isdigit():
            raise PayloadError("Content-Length is not a number", code="bad_content_length")
        if int(content_length) > limit:
            raise BodyTooLargeError(f"body of {content_length} bytes exceeds the "
                                    f"{limit} byte limit")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise PayloadError("client disconnected before the body was complete",
                               code="incomplete_body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(f"body exceeds the {limit} byte limit")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if BODY_LATE_SCOPE_KEY in scope:
            raise BodyTimeoutError("the body did not arrive within the deadline")


# A JSON \u0000 escape: an odd run of backslashes before u0000 (an even run is a
# literal backslash followed by the text "u0000").
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def parse_json(body: bytes) -> Any:
    """Strict JSON: UTF-8, no NaN/Infinity, no duplicate keys (parsers disagree on them),
    no NUL character (Postgres text and jsonb cannot store one: found by schemathesis,
    a delivery id holding a NUL escape made the notice insert fail with a 500)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise PayloadError("body is not valid UTF-8", code="malformed_json") from None
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise PayloadError("the NUL character (\\u0000) is not accepted in any string",
                           code="malformed_json")
    _check_nesting(text)
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError:
        raise PayloadError("JSON is nested too deeply", code="malformed_json") from None
    except PayloadError:
        raise
    except ValueError as exc:  # JSONDecodeError, and int() of an absurdly long number
        raise PayloadError(f"malformed JSON: {exc}", code="malformed_json") from None


def _check_nesting(text: str) -> None:
    """Refuse JSON nested deeper than MAX_NESTING before the parser recurses into it."""
    if text.count("[") + text.count("{") <= MAX_NESTING:
        return  # cannot be deeper than the number of openers (the common, fast case)
    depth = 0
    in_string = False
    for token in _STRUCTURE.finditer(text):
        char = token.group()
        if char == '"':
            in_string = not in_string
        elif in_string or len(char) == 2:
            continue  # brackets inside strings, and escape pairs, do not nest
        elif char in "[{":
            depth += 1
            if depth > MAX_NESTING:
                raise PayloadError(f"JSON is nested deeper than {MAX_NESTING} levels",
                                   code="malformed_json")
        else:
            depth -= 1


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise PayloadError(f"duplicate key {key[:80]!r} in a JSON object",
                                   code="malformed_json")
            seen.add(key)
    return obj


def _no_constant(name: str) -> Any:
    raise PayloadError(f"{name} is not valid JSON", code="malformed_json")
