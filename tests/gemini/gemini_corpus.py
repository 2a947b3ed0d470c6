"""Gemini API answers, as the bytes a server sends, for the loopback server.

Sources, said honestly: the SDK (``googleapis/python-genai``) keeps its replay
recordings outside its repository, so no recorded ``alt=sse`` body could be
taken byte for byte. The ``fixtures/*.sse`` files are assembled here, one
``data: <compact JSON>\\r\\n\\r\\n`` event per chunk as the API frames them,
in the shapes of the Gemini API reference (``GenerateContentResponse``:
``candidates[].content.parts``, ``finishReason``, ``safetyRatings``,
``promptFeedback.blockReason``, ``usageMetadata`` with ``thoughtsTokenCount``
and ``cachedContentTokenCount``, ``modelVersion``, ``responseId``) and of its
function-calling and thought-signature guides (parallel calls where only the
first ``functionCall`` part carries the ``thoughtSignature``; thought summary
parts with ``thought: true``; a signature on an empty text part at the end of
a text answer). The signatures are opaque base64 of the documented form.

Byte for byte from the SDK's tests:

- :data:`ERROR_MID_STREAM`: ``EVENT_STREAM_DATA_WITH_ERROR`` of
  ``google/genai/tests/client/test_async_stream.py`` (a text chunk, then an
  ``{"error": {...}}`` chunk), each line framed as an SSE event;
- the error bodies: the ``google.rpc.Status`` shape (``{"error": {"code",
  "message", "status"}}``) that the SDK's ``errors.APIError`` reads.

The SDK's own reading of the same bytes (``generate_content_stream``'s parsed
``GenerateContentResponse`` chunks) is the tests' oracle, so nothing here is
trusted as turnfsm's expectation.
"""

from __future__ import annotations

import json
from pathlib import Path

from gemini_loopback import Reply, error_body
from loopback import Case, cut_inside_characters

FIXTURES = Path(__file__).resolve().parent / "fixtures"

ERROR_MID_STREAM = (
    b'data: {"candidates":[{"content":{"parts":[{"text":"test"}],"role":"model"}}]}\r\n\r\n',
    b'data: {"error":{"code":500,"message":"Error","status":"INTERNAL"}}\r\n\r\n',
)


def events(name: str) -> list[bytes]:
    """A fixture's events, each with its blank line."""
    raw = (FIXTURES / name).read_bytes()
    return [e + b"\r\n\r\n" for e in raw.split(b"\r\n\r\n") if e]


def corpus() -> list[Case]:
    return [
        Case("text", events("text.sse")),
        Case("text_multi_byte", cut_inside_characters(events("multi_byte.sse"))),
        Case("parallel_calls", events("parallel_calls.sse"), tools=True),
        Case(
            "thought_then_call",
            cut_inside_characters(events("thought_then_call.sse")),
            tools=True,
        ),
        Case("signed_text", events("signed_text.sse")),
        Case("max_tokens", events("max_tokens.sse")),
        Case("safety", events("safety.sse")),
        Case("prompt_blocked", events("prompt_blocked.sse")),
        Case("malformed_function_call", events("malformed_call.sse")),
    ]


def error_mid_stream() -> Reply:
    return Reply(chunks=list(ERROR_MID_STREAM))


def status_error(
    code: int,
    status: str,
    message: str,
    *,
    retry_after: str | None = None,
    delay: str | None = None,
) -> Reply:
    """An error answer: ``retry_after`` as a header, ``delay`` as the body's
    ``RetryInfo.retryDelay`` (as the Gemini API sends a 429's)."""
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    if delay is None:
        return Reply(status=code, body=error_body(code, status, message), headers=headers)
    body = {
        "error": {
            "code": code,
            "message": message,
            "status": status,
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}],
        }
    }
    return Reply(status=code, body=json.dumps(body).encode(), headers=headers)
