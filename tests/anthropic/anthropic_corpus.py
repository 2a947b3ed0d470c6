"""Messages API answers, as the bytes a server sends, for the loopback server.

Sources (``anthropics/anthropic-sdk-python`` at commit
``009b035305e0724ce108ebd796935f91711fc6e1``):

- ``fixtures/basic_response.txt``, ``tool_use_response.txt``,
  ``refusal_response.txt``, ``incomplete_partial_json_response.txt``: the
  SDK's ``tests/lib/streaming/fixtures/`` files, byte for byte;
- ``fixtures/stream-a-refusal.sse``: the SDK's
  ``tests/fixtures/fable-fallback/stream-a-refusal.sse``, byte for byte (a
  thinking block with its ``signature_delta``, then text, then a refusal);
- :data:`OVERLOADED_EVENT` and the multi-byte split: the bytes of the SDK's
  ``tests/test_streaming.py`` (``test_error_type``,
  ``test_multi_byte_character_multiple_chunks``: ``известни`` cut where that
  test cuts it);
- the error bodies: the SDK's ``tests/test_middleware.py`` ``error_body``
  shape (``{"type": "error", "error": {"type", "message"}}``).

A fixture is replayed as the SDK's own test helper feeds it (each line with
``\\n``, one HTTP chunk per line). Where the SDK has no fixture (a thinking
block before a tool call, redacted thinking, parallel calls), the stream is
assembled from those fixtures' own event lines, re-indexed, plus the
documented ``redacted_thinking`` block shape; :func:`splice` says how.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from anthropic_loopback import Reply, error_body
from loopback import Case, cut_inside_characters

FIXTURES = Path(__file__).resolve().parent / "fixtures"

OVERLOADED_EVENT = (
    b"event: error\n",
    b'data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n',
)
"""An ``error`` event inside a 200 stream (the SDK's ``test_error_type``)."""

MULTI_BYTE = (b"\xd0", b"\xb8\xd0\xb7\xd0", b"\xb2\xd0\xb5\xd1\x81\xd1\x82\xd0\xbd\xd0\xb8")
"""``известни`` as the SDK's ``test_multi_byte_character_multiple_chunks`` cuts it."""

REDACTED_DATA = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGm"
"""The opaque ``data`` of a ``redacted_thinking`` block (the documented shape:
base64 text the client sends back unchanged)."""


def lines(name: str) -> list[bytes]:
    """A fixture's lines, each with its ``\\n`` (as the SDK's test helper sends them)."""
    return [line.encode() + b"\n" for line in (FIXTURES / name).read_text().splitlines()]


def events(name: str) -> list[tuple[bytes, bytes]]:
    """A fixture's events: (``event:`` line, ``data:`` line) pairs."""
    out: list[tuple[bytes, bytes]] = []
    raw = lines(name)
    for i, line in enumerate(raw):
        if line.startswith(b"event: "):
            out.append((line, raw[i + 1]))
    return out


def frame(pairs: list[tuple[bytes, bytes]]) -> list[bytes]:
    """Events as chunks, a blank line after each."""
    out: list[bytes] = []
    for head, data in pairs:
        out += [head, data, b"\n"]
    return out


def reindex(pair: tuple[bytes, bytes], index: int) -> tuple[bytes, bytes]:
    """An event line moved to another content block index (only the index changes)."""
    head, data = pair
    return head, re.sub(rb'"index":\s*\d+', b'"index":%d' % index, data, count=1)


def kind(pair: tuple[bytes, bytes]) -> str:
    return pair[0].decode().split(":", 1)[1].strip()


def block(pairs: list[tuple[bytes, bytes]], index: int) -> list[tuple[bytes, bytes]]:
    """The start, delta and stop events of one content block."""
    return [
        p
        for p in pairs
        if kind(p).startswith("content_block")
        and json.loads(p[1][len(b"data: ") :]).get("index") == index
    ]


def event(type_: str, data: dict[str, object]) -> tuple[bytes, bytes]:
    return (
        f"event: {type_}\n".encode(),
        b"data: " + json.dumps({"type": type_, **data}, separators=(",", ":")).encode() + b"\n",
    )


def message_delta(stop_reason: str, output_tokens: int) -> tuple[bytes, bytes]:
    return event(
        "message_delta",
        {
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
    )


def splice(*blocks: list[tuple[bytes, bytes]], stop: str, start: str) -> list[bytes]:
    """A stream: ``start``'s ``message_start``, the blocks re-indexed in order,
    a ``message_delta`` with ``stop`` and ``message_stop``."""
    first = next(p for p in events(start) if kind(p) == "message_start")
    pairs = [first]
    for n, events_of_block in enumerate(blocks):
        pairs += [reindex(p, n) for p in events_of_block]
    pairs += [message_delta(stop, 90), event("message_stop", {})]
    return frame(pairs)


def redacted_block() -> list[tuple[bytes, bytes]]:
    return [
        event(
            "content_block_start",
            {"index": 0, "content_block": {"type": "redacted_thinking", "data": REDACTED_DATA}},
        ),
        event("content_block_stop", {"index": 0}),
    ]


def second_call_block() -> list[tuple[bytes, bytes]]:
    """The tool_use block of ``tool_use_response.txt`` as a second call: its own
    id and city, the JSON in other pieces."""
    pairs = block(events("tool_use_response.txt"), 1)
    out = []
    for head, data in pairs:
        data = data.replace(b"toolu_01NRLabsLyVHZPKxbKvkfSMn", b"toolu_01A09q90qw90lq917835lq9")
        data = data.replace(b'on\\": \\"P"', b'on\\": \\"O"')
        data = data.replace(b'"partial_json":"ar"', b'"partial_json":"sl"')
        data = data.replace(b'"partial_json":"is\\"}"', b'"partial_json":"o\\"}"')
        out.append((head, data))
    return out


def multi_byte_text() -> list[bytes]:
    """``basic_response.txt`` with one more text delta, ``известни``, whose bytes
    arrive cut as the SDK's multi-byte test cuts them."""
    pairs = events("basic_response.txt")
    at = max(i for i, p in enumerate(pairs) if kind(p) == "content_block_delta")
    out = frame(pairs[: at + 1])
    out += [
        b"event: content_block_delta\n",
        b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" ',
        *MULTI_BYTE,
        b'"}}\n',
        b"\n",
    ]
    return out + frame(pairs[at + 1 :])


def corpus() -> list[Case]:
    tool = events("tool_use_response.txt")
    thinking = block(events("stream-a-refusal.sse"), 0)
    return [
        Case("text", lines("basic_response.txt")),
        Case("text_multi_byte", multi_byte_text()),
        Case("tool_json_in_pieces", lines("tool_use_response.txt"), tools=True),
        Case(
            "parallel_calls",
            splice(
                block(tool, 0),
                block(tool, 1),
                second_call_block(),
                stop="tool_use",
                start="tool_use_response.txt",
            ),
            tools=True,
        ),
        Case(
            "thinking_then_tool",
            cut_inside_characters(
                splice(
                    thinking,
                    block(tool, 0),
                    block(tool, 1),
                    stop="tool_use",
                    start="stream-a-refusal.sse",
                )
            ),
            tools=True,
        ),
        Case(
            "redacted_thinking",
            splice(
                thinking,
                redacted_block(),
                block(tool, 1),
                stop="tool_use",
                start="stream-a-refusal.sse",
            ),
            tools=True,
        ),
        Case("max_tokens", lines("incomplete_partial_json_response.txt")),
        Case("refusal", lines("refusal_response.txt")),
        Case("thinking_refusal", cut_inside_characters(lines("stream-a-refusal.sse"))),
    ]


def overloaded_mid_stream() -> Reply:
    """The first events of ``basic_response.txt``, then an ``overloaded_error`` event."""
    pairs = events("basic_response.txt")
    return Reply(chunks=[*frame(pairs[:4]), *OVERLOADED_EVENT])


def status_error(status: int, type_: str, message: str, retry_after: str | None = None) -> Reply:
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    return Reply(status=status, body=error_body(type_, message), headers=headers)
