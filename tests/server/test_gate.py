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


def test_a_declared_length_is_read_as_the_whole_number_check_reads_it() -> None:
    from turnfsm.server._gate import Gate

    gate = Gate(_app, limit=100)
    for value, declared in [
        (b"0", 0),
        (b"007", 7),
        (b"9" * 18, 10**18 - 1),
        (b"1" + b"0" * 18, 10**18),  # the largest the check takes
        (b"1" + b"0" * 17 + b"1", 0),  # over it: refused, counted as read
        (b"", 0),
        (b"-1", 0),
        (b"+5", 0),
        (b" 5", 0),
        ("\u0665".encode(), 0),  # a digit, not an ASCII one
    ]:
        assert gate._read_headers(_scope((b"content-length", value)))[1] == declared, value


def test_an_answer_gets_the_headers_it_lacks_once_each() -> None:
    from turnfsm.server._gate import HEADERS, NOT_HTML_CSP, _with_headers

    csp = (b"content-security-policy", NOT_HTML_CSP.encode())
    assert _with_headers([]) == [*HEADERS, csp]
    html = [(b"Content-Type", b"text/html; charset=utf-8")]
    assert _with_headers(html) == [*html, *HEADERS]
    own = [(b"Cache-Control", b"public"), (b"Content-Security-Policy", b"default-src 'self'")]
    assert _with_headers(own) == [*own, *HEADERS[:2]]
    # the same answer twice: the same headers, a list of its own each time
    first, second = _with_headers(own), _with_headers(own)
    assert first == second and first is not second
