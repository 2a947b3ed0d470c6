"""The Gate's one pass over a request's headers: the first ``Host`` and the
first ``Content-Length`` count, as each check read them alone, and only a
request with a ``traceparent`` goes through the trace-context layer."""

from __future__ import annotations

from typing import Any

from turnfsm.observability import TraceContextMiddleware


async def _app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("not called")


def _scope(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/", "headers": list(headers)}


def test_the_first_host_and_length_count_and_a_traceparent_takes_the_traced_app() -> None:
    from turnfsm.server._gate import Gate

    gate = Gate(_app, limit=100, open_host_check=True)
    assert isinstance(gate.traced, TraceContextMiddleware)
    assert gate.traced.app is _app
    plain = _scope(
        (b"host", b"127.0.0.1:8000"),
        (b"content-length", b"12"),
        (b"host", b"evil.example"),
        (b"content-length", b"999"),
    )
    assert gate._read_headers(plain) == ("127.0.0.1:8000", 12, _app)
    traced = _scope((b"traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"))
    assert gate._read_headers(traced) == ("", 0, gate.traced)
    assert gate._read_headers(_scope((b"content-length", b"x1"))) == ("", 0, _app)
