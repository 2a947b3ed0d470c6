"""A small Messages API server on loopback, for tests: it replays bodies byte
for byte (:class:`loopback.RawServer`: a stream is the reply's ``chunks``, one
HTTP chunk each; a whole body is ``body``). Every request is recorded; with no
reply left it answers 400 with an error body saying so.
"""

from __future__ import annotations

import json

from loopback import RawReply, RawServer, Recorded

__all__ = ["LoopbackServer", "Recorded", "Reply", "error_body"]

Reply = RawReply


def error_body(type_: str, message: str) -> bytes:
    """An error body as the Messages API sends it."""
    return json.dumps({"type": "error", "error": {"type": type_, "message": message}}).encode()


class LoopbackServer(RawServer):
    """Start with :meth:`start` (or as a context manager); ``url`` is the base URL
    to give the SDK (``http://127.0.0.1:<port>``: it adds ``/v1/messages``)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def error_reply(self, message: str) -> bytes:
        return error_body("invalid_request_error", message)
