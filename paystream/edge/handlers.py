"""Every error of an edge's FastAPI app answered in the one JSON error body
(paystream/edge/errors.py), with the request's trace id: a refusal (the edge's own, or
a domain's, paystream/refusals.py, by its kind), Starlette's own
HTTP errors (404, 405), a request that fails validation (400), and a bug (500).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from paystream.edge.errors import RefusalError, error_body, refusal_of, retry_headers
from paystream.edge.observe import internal_error, request_trace_id
from paystream.refusals import Refused

# The refusal's answer, when the edge does more than answer it (count it, log it).
AnswerRefusal = Callable[[Request, RefusalError], JSONResponse]
# (code, reason) of a request that failed validation.
Invalid = Callable[[RequestValidationError], tuple[str, str]]


def answer_refusal(request: Request, exc: RefusalError) -> JSONResponse:
    """A refusal's answer: its status, the error body, Retry-After when it says one."""
    return JSONResponse(error_body(exc.code, exc.detail, request_trace_id(request)),
                        status_code=exc.status, headers=retry_headers(exc))


def install(app: FastAPI, *, invalid: Invalid,
            refusal: AnswerRefusal = answer_refusal) -> None:
    """Answer `app`'s errors: refusals by `refusal`, a failed validation 400 with the
    code and reason `invalid` gives."""

    @app.exception_handler(RefusalError)
    async def on_refusal(request: Request, exc: RefusalError) -> JSONResponse:
        return refusal(request, exc)

    @app.exception_handler(Refused)
    async def on_domain_refusal(request: Request, exc: Refused) -> JSONResponse:
        return refusal(request, refusal_of(exc))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(error_body(f"http_{exc.status_code}", str(exc.detail),
                                       request_trace_id(request)),
                            status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        code, reason = invalid(exc)
        return JSONResponse(error_body(code, reason, request_trace_id(request)),
                            status_code=400)

    @app.exception_handler(Exception)
    async def on_bug(request: Request, exc: Exception) -> JSONResponse:
        # The JSON 500 of every route; the RequestObserver outside logs the exception
        # (Starlette re-raises it after this answer), never to the caller.
        return JSONResponse(internal_error(request_trace_id(request)), status_code=500)
