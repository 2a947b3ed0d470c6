"""The checks of the Temporal kill test (``kill.py``): what was stored
against what was sent (:func:`check_stored`), every stream
(:func:`check_stream`), and the run itself: every request answered within
the bound a call on Temporal has (:class:`Requests`), no traceback in the log
of any ``turnfsm`` process (:func:`check_logs`), and the workers' progress
(:func:`check_progress`)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
from scale.kill import check_context  # the workers' kill test's checker

from turnfsm.audit import audit_jsonl, audit_records, verify_audit_log
from turnfsm.model import Role
from turnfsm.temporal._faults import ACCEPT_WITHIN, FIRST_STEP_WITHIN, GRACE

__all__ = [
    "EXPECTED_5XX",
    "MARGIN",
    "REQUEST_BOUND",
    "TRACEBACKS",
    "Requests",
    "answered_refs",
    "check_logs",
    "check_progress",
    "check_stored",
    "check_stream",
]

REQUEST_BOUND = ACCEPT_WITHIN + FIRST_STEP_WITHIN + GRACE
"""The longest a call without ``?wait=true`` may take on ``turnfsm serve
--turns temporal`` (docs/temporal.md, "When Temporal does not answer")."""
MARGIN = 10.0
"""Seconds past the bound a request is given on a loaded machine (the server's
own work, a store that is slow under the faults)."""
EXPECTED_5XX = frozenset({"temporal_unavailable", "not_ready"})
"""The 5xx a run may see: Temporal killed, a server starting."""
TRACEBACKS = ("Traceback (most recent call last)", "Exception in ASGI application")


class Stream(Protocol):
    cid: str
    items: list[tuple[float, dict[str, Any]]]


@dataclass
class Requests:
    """Every request a client made, timed (the event streams are not
    requests: they stay open by design)."""

    bound: float = REQUEST_BOUND + MARGIN
    slow: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    """Answers 5xx other than :data:`EXPECTED_5XX`."""
    count: int = 0
    longest: float = 0.0

    async def send(
        self, http: httpx.AsyncClient, method: str, path: str, **kw: Any
    ) -> httpx.Response:
        started = time.monotonic()
        outcome = "no answer"
        try:
            r = await http.request(method, path, **kw)
            outcome = str(r.status_code)
            if r.status_code >= 500 and _code(r) not in EXPECTED_5XX:
                self.failed.append(f"{method} {path}: {r.status_code} {r.text[:300]}")
            return r
        finally:
            took = time.monotonic() - started
            self.count += 1
            self.longest = max(self.longest, took)
            if took > self.bound:
                self.slow.append(f"{method} {path}: {outcome} after {took:.1f}s")

    def problems(self) -> list[str]:
        slow = [f"a request took longer than {self.bound:g}s: {s}" for s in self.slow]
        return slow + [f"a request answered with a server error: {f}" for f in self.failed]


def _code(r: httpx.Response) -> str | None:
    try:
        return str(r.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return None


def check_logs(logs: list[Path]) -> list[str]:
    """A line of a traceback (or of uvicorn's "Exception in ASGI
    application") in any of ``logs``, with what follows it."""
    out: list[str] = []
    for log in logs:
        if not log.exists():
            continue
        lines = log.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if any(mark in line for mark in TRACEBACKS):
                around = " | ".join(lines[max(i - 1, 0) : i + 12])[:1500]
                out.append(f"{log.name}: a traceback at line {i + 1}: {around}")
                break
    return out


def answered_refs(ctx: Any) -> set[str]:
    """The messages (their refs) the model's final answer, ``done REF.``, is stored for."""
    out: set[str] = set()
    for node in ctx.history():
        text = _text(node.message)
        if node.message.role is Role.ASSISTANT and text.startswith("done ") and text.endswith("."):
            out.add(text[len("done ") : -1])
    return out


def check_progress(answered: int, during_faults: int, floor: int) -> list[str]:
    """The workers made progress: at least ``floor`` acknowledged messages
    answered, at least one of them sent while the faults ran."""
    out: list[str] = []
    if answered < floor:
        out.append(
            f"the workers made too little progress: {answered} acknowledged messages "
            f"answered, fewer than {floor}"
        )
    if during_faults == 0:
        out.append("the workers made no progress while the faults ran: no message answered")
    return out


def _text(message: Any) -> str:
    return "".join(getattr(p, "text", "") for p in message.content)


def check_stored(
    cid: str, ctx: Any, steps: list[Any], attempts: list[tuple[str, str]], runs: Counter[str]
) -> list[str]:
    """The messages against the attempts; then the workers' checker (answers,
    results, ``charge``'s runs) on the messages stored; then the audit log."""
    out: list[str] = []
    users = [_text(n.message) for n in ctx.history() if n.message.role is Role.USER]
    order = [ref for ref, _ in attempts]
    answers = dict(attempts)
    for ref, n in Counter(users).items():
        if n > 1:
            out.append(f"{cid}: message {ref} stored {n} times")
        if ref not in answers:
            out.append(f"{cid}: message {ref} stored but never sent")
    for ref, answer in attempts:
        if answer == "acked" and ref not in users:
            out.append(f"{cid}: acknowledged message {ref} not stored")
        if answer == "refused" and ref in users:
            out.append(f"{cid}: refused message {ref} stored")
    known = [ref for ref in users if ref in answers]
    if known != sorted(known, key=order.index):
        out.append(f"{cid}: messages stored in the order {known}, sent in the order {order}")
    unknown = frozenset(ref for ref, answer in attempts if answer == "unknown")
    out += check_context(cid, ctx, steps, users, runs, unknown)
    lines = audit_jsonl(audit_records(ctx.id, steps, ctx.message_pool.values())).splitlines()
    verified = verify_audit_log(lines)
    if not verified.ok:
        out.append(f"{cid}: the audit log does not verify: line {verified.line}: {verified.reason}")
    return out


def check_stream(me: Stream, logged: dict[tuple[str, int], tuple[str, float]]) -> list[str]:
    """Each seq once, in order, as itself or in a Resync's range, up to the
    log's last; durable events as logged; no delta on a durable seq; nothing
    durable given only as a Resync when it was logged before the stream was
    asked for."""
    out: list[str] = []
    cid = me.cid
    last_logged = max((s for (c, s) in logged if c == cid), default=0)
    covered = 0
    for asked, ev in me.items:
        kind = ev.get("kind")
        first, last = (ev["first_seq"], ev["last_seq"]) if kind == "Resync" else (ev["seq"],) * 2
        if kind == "Resync" and first == 1 and covered > 0:
            # the server took the stream's Last-Event-ID for one past the
            # context's last event: everything 1..last is to be pulled again,
            # and the stream goes on after it (docs/server.md)
            out.append(
                f"stream {cid}: Last-Event-ID {covered}, a seq the server itself sent, "
                f"was answered as past the context's last event (a Resync 1..{last})"
            )
            covered = last
            continue
        if first != covered + 1:
            out.append(f"stream {cid}: {kind} covers {first}..{last} after {covered}")
        covered = max(covered, last)
        if kind == "Resync":
            for seq in range(first, last + 1):
                found = logged.get((cid, seq))
                if found is not None and found[1] < asked:
                    out.append(
                        f"stream {cid}: seq {seq} ({found[0]}) was in the log "
                        f"{asked - found[1]:.2f}s before the stream was asked for, "
                        "but came only inside a Resync"
                    )
                    break
            continue
        found = logged.get((cid, first))
        if kind == "ContentDelta":
            if found is not None:
                out.append(f"stream {cid}: a delta at seq {first}, where the log has {found[0]}")
        elif found is None:
            out.append(f"stream {cid}: {kind} at seq {first} is not in the log")
        elif found[0] != kind:
            out.append(f"stream {cid}: {kind} at seq {first}, the log has {found[0]}")
    if covered < last_logged:
        out.append(f"stream {cid}: ends at seq {covered}, the log at {last_logged}")
    return out
