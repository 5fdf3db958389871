"""What a feature will not do, and why: the domain's refusals.

Feature code (invoices, ...) raises these; the door the request came by answers them:
an HTTP edge with 400, 404 or 409 and the one error body (paystream/edge/errors.py
`refusal_of`, installed by paystream/edge/handlers.py), a command with its message and
exit code. So the domain knows no HTTP, and every door says the same thing.
"""

from __future__ import annotations


class Refused(Exception):  # noqa: N818 - a refusal, the message says why
    """`code` is a short machine label, `detail` the reason a person reads."""

    code = "refused"

    def __init__(self, detail: str, *, code: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code


class Invalid(Refused):
    """A value the domain's rules refuse (HTTP 400)."""

    code = "invalid_request"


class NotFound(Refused):
    """No such thing (HTTP 404)."""

    code = "not_found"


class Conflict(Refused):
    """The request contradicts what is stored; nothing was written (HTTP 409)."""

    code = "conflict"
