"""The rules for values in a URL, shared by the HTTP edges (the merchant API and the
operator console): a value that breaks one is refused 400 before any work is done, so
nothing a client sends reaches SQL as a value Postgres cannot take.

- ids are the stored columns' own rules (a user id: schema/events.py USER_ID_PATTERN; an
  event's or a withdrawal's id: 1 to 200 printable ASCII characters);
- a row number is a positive bigint (Postgres' `bigint`, at most 2**63 - 1);
- free text (a filter, a search) has no control character (NUL above all: Postgres
  cannot store it) and a length bound.

`url_refusal` is the door's check of a whole request target, every value at once: valid
UTF-8 once percent-decoded and no control character (the console's Guard runs it, so a
parameter added later is covered before anyone types it).
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import unquote_to_bytes

from fastapi import Path, Query

from paystream.schema.events import USER_ID_PATTERN

BIGINT_MAX = 2**63 - 1
USER_ID = f"^{USER_ID_PATTERN.pattern}$"
PRINTABLE_ID = r"^[!-~]{1,200}$"
# Any character but a control one (Unicode category Cc: C0, DEL and C1).
NO_CONTROL = r"^\P{Cc}*$"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

UserIdPath = Annotated[str, Path(pattern=USER_ID, max_length=64)]
PrintableIdPath = Annotated[str, Path(pattern=PRINTABLE_ID)]
RowIdPath = Annotated[int, Path(ge=1, le=BIGINT_MAX)]
RowIdQuery = Annotated[int | None, Query(ge=1, le=BIGINT_MAX)]


def text_query(max_length: int) -> object:
    """A free-text query parameter: no control character, at most `max_length`."""
    return Query(max_length=max_length, pattern=NO_CONTROL)


def url_refusal(raw_path: bytes, query_string: bytes) -> str | None:
    """Why a request target is refused, or None: each part percent-decoded must be UTF-8
    and hold no control character."""
    for part, what in ((raw_path, "the path"), (query_string, "the query")):
        if not part:
            continue
        # '+' is a space in a query (form encoding); it cannot hide a control character.
        decoded = unquote_to_bytes(part.replace(b"+", b" ") if part is query_string
                                   else part)
        try:
            text = decoded.decode("utf-8")
        except UnicodeDecodeError:
            return f"{what} is not UTF-8 once percent-decoded"
        if _CONTROL.search(text):
            return f"{what} holds a control character (NUL, CR, LF, ...)"
    return None


def form_refusal(fields: dict[str, str]) -> str | None:
    """Why a form is refused, or None: no field may hold a control character other than
    a tab or a line break (a reason typed in a text area has them)."""
    for name, value in fields.items():
        if _CONTROL.search(name) or _CONTROL.search(value.replace("\t", "")
                                                     .replace("\r", "").replace("\n", "")):
            return f"the form field {name[:40]!r} holds a control character (NUL, ...)"
    return None
