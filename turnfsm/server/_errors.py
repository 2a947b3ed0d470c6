"""Every error as JSON ``{"error": {"code", "message"}}`` with its status; no traces."""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from .. import errors as e
from ..states import NON_RESTING
from ..storage._secrets import scrub

__all__ = ["ApiError", "busy_if_under_way", "error_response", "install_handlers", "status_of"]

log = structlog.get_logger("turnfsm.server")

# most specific first: the first class the error is an instance of wins
_STATUS: tuple[tuple[type[e.TurnFSMError], int, str], ...] = (
    (e.ContextNotFound, 404, "context_not_found"),
    (e.UnknownToolCall, 404, "unknown_tool_call"),
    (e.AnswerNotAChoice, 422, "answer_not_a_choice"),
    (e.ToolNameClash, 422, "tool_name_clash"),
    (e.InvalidInput, 422, "invalid_input"),
    (e.HistoryConflict, 409, "history_conflict"),
    (e.ContextLeased, 409, "context_leased"),
    (e.ContextBusy, 409, "context_busy"),
    (e.IllegalTransition, 409, "illegal_transition"),
    (e.BranchError, 409, "branch_error"),
    (e.NotAtRest, 409, "not_at_rest"),
    (e.SubContextError, 409, "sub_context_error"),
    (e.ToolCallNotPending, 409, "tool_call_not_pending"),
    (e.NotAQuestion, 409, "not_a_question"),
    (e.QuestionNeedsAnswer, 409, "question_needs_answer"),
    (e.NotAClientCall, 409, "not_a_client_call"),
    (e.VersionConflict, 409, "version_conflict"),
    (e.LeaseLost, 409, "lease_lost"),
    (e.StoreError, 503, "store_error"),
    (e.TemporalUnavailable, 503, "temporal_unavailable"),
    (e.LLMError, 502, "llm_error"),
    (e.RenderError, 500, "render_error"),
)


class ApiError(Exception):
    """An error the server itself raises (not the engine's)."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
        super().__init__(message)


def status_of(exc: e.TurnFSMError) -> tuple[int, str]:
    for cls, status, code in _STATUS:
        if isinstance(exc, cls):
            return status, code
    return 400, "turnfsm_error"


_UNDER_WAY = frozenset(str(state) for state in NON_RESTING)


def busy_if_under_way(exc: e.TurnFSMError) -> e.TurnFSMError:
    """An event refused because the context is away from rest, as what it is:
    a turn under way (queued for a worker, running on one or in another
    process), ``409 context_busy`` as for a turn this server runs, not
    ``illegal_transition``. Any other error as it is."""
    if isinstance(exc, e.IllegalTransition) and exc.state in _UNDER_WAY:
        busy = e.ContextBusy(exc.context_id or "?", exc.state)
        busy.args = (
            f"context {exc.context_id!r} is busy: a turn is under way (state "
            f"{exc.state!r}: queued for a worker, or running); wait for it to rest, or "
            "cancel it",
        )
        return busy
    return exc


def error_response(
    status: int, code: str, message: str, where: str | None = None, **headers: str
) -> JSONResponse:
    # no store URL's password in an answer, whatever error text it quotes
    body: dict[str, Any] = {"code": code, "message": scrub(message)}
    if where is not None:
        body["where"] = where
    return JSONResponse({"error": body}, status_code=status, headers=headers or None)


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(e.TurnFSMError)
    async def _engine(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, e.TurnFSMError)
        exc = busy_if_under_way(exc)
        status, code = status_of(exc)
        if isinstance(exc, e.HistoryConflict):  # names the id the body gave it (null if none)
            body = {"code": code, "message": scrub(str(exc)), "where": exc.where}
            return JSONResponse({"error": {**body, "message_id": exc.message_id}}, status)
        where = exc.where if isinstance(exc, e.InvalidInput) else None
        if status >= 500:
            log.warning("request_failed", path=request.url.path, code=code, error=scrub(str(exc)))
        if isinstance(exc, e.TemporalUnavailable):  # back in a moment, most likely
            return error_response(
                status, code, str(exc), where, **{"Retry-After": str(exc.retry_after)}
            )
        return error_response(status, code, str(exc), where)

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return error_response(exc.status, exc.code, exc.message, **exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()))
        said = str(first.get("msg")).removeprefix("Value error, ")
        return error_response(422, "invalid_input", f"{where}: {said}", where)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 400:
            # FastAPI's "There was an error parsing the body": a body that is
            # not UTF-8, JSON nested too deeply to read, a malformed form
            return error_response(
                422,
                "invalid_input",
                "body: cannot be read (not UTF-8, nested too deeply, or malformed)",
                "body",
            )
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        said = scrub(f"{type(exc).__name__}: {exc}")
        log.error("unexpected_error", path=request.url.path, error=said)
        return error_response(500, "internal_error", "an unexpected error; see the server's log")
