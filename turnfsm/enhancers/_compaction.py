"""Compaction: older history replaced in the view by a summary the LLM wrote.

The summary is a stored message of its own (role ``system``, appended to the
branch when it is made), whose ``metadata.extra["summary"]`` records what it
covers: the first ``count`` messages of the branch, the last of them
``last_id``. A later summary extends the one before it (its prompt holds the
previous summary and only the messages since), so a summary is made once per
threshold crossing and reused on every later request.

This module decides what to summarize and builds the view from the newest
summary (pure functions of the stored messages); the engine makes the LLM call
(see docs/architecture.md, "Compaction").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput
from ..model import ChatContext, LLMRequest, MessageNode, Role
from ._budget import EstimatingCounter, TokenCounter, calibration

__all__ = [
    "SUMMARY_PROMPT",
    "Compaction",
    "CompactionPlan",
    "summary_block",
    "summary_of",
]

SUMMARY_PROMPT = (
    "You keep the running summary of a conversation between a user and an "
    "assistant that can call tools. Write a concise summary that a reader who sees "
    "only it and the newest messages can continue from: the user's goals and "
    "constraints, what was decided, the facts learned (tool results that still "
    "matter, with their values), what is still open and the task in progress. "
    "When a previous summary is given, extend it with the new messages: keep "
    "what still matters, drop what was settled. Write in the conversation's "
    "language. Answer with the summary only."
)
"""The system message of the summary call (``Compaction(prompt=...)`` replaces it)."""

RESULT_CHARS = 2000
"""A tool result longer than this is cut in the summary call's transcript."""


def summary_of(node: MessageNode) -> dict[str, Any] | None:
    """What a stored summary covers (``{"count": n, "last_id": id}``), or None
    when ``node`` is no summary."""
    msg = node.message
    if msg.role is not Role.SYSTEM:
        return None
    found = msg.metadata.extra.get("summary")
    return found if isinstance(found, dict) else None


def summary_block(text: str, count: int) -> str:
    """The summary as the view shows it (a ``system`` message)."""
    return f'<summary of="the first {count} messages of this conversation">\n{text}\n</summary>'


@dataclass(slots=True)
class CompactionPlan:
    """What the next summary call covers: the branch's messages ``start`` to
    ``end`` (exclusive), after the previous summary (``previous``, its text)."""

    previous: str | None
    start: int
    end: int
    messages: list[dict[str, Any]]
    """The summary call's messages (the prompt and the transcript)."""


class Compaction:
    """Replaces older history in the view by a summary made by the LLM.

    When the view (the newest summary, then the messages it does not cover)
    counts more than ``threshold_tokens`` (by ``counter``, calibrated like
    :class:`TokenBudget`), the engine asks the LLM, through its own adapter and
    before the turn's next call, to summarize the messages that are not
    covered yet, except the newest turns worth ``keep_tokens``. The summary
    call's system message is ``prompt`` (:data:`SUMMARY_PROMPT`); its user message
    holds the previous summary and a transcript of the new messages. At most
    ``max_summary_input`` tokens of transcript go in one call (the rest waits for
    the next crossing).

    The view then shows the summary as a ``system`` message right after the
    system prompt (:func:`summary_block`), and the messages after what it
    covers; stored summaries inside them are left out. The request's
    ``metadata["compaction"]`` names the summary used and what it covers.
    """

    def __init__(
        self,
        threshold_tokens: int,
        *,
        keep_tokens: int | None = None,
        prompt: str = SUMMARY_PROMPT,
        max_summary_input: int = 16_000,
        counter: TokenCounter | None = None,
    ) -> None:
        for where, value in (
            ("threshold_tokens", threshold_tokens),
            ("max_summary_input", max_summary_input),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(where, f"must be an integer >= 1, not {value!r}")
        keep = threshold_tokens // 2 if keep_tokens is None else keep_tokens
        if isinstance(keep, bool) or not isinstance(keep, int) or not 0 <= keep < threshold_tokens:
            raise InvalidInput(
                "keep_tokens", f"must be an integer from 0 to below threshold_tokens, not {keep!r}"
            )
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidInput("prompt", "must be a non-empty text")
        self.threshold_tokens = threshold_tokens
        self.keep_tokens = keep
        self.prompt = prompt
        self.max_summary_input = max_summary_input
        self.counter: TokenCounter = counter if counter is not None else EstimatingCounter()

    # ------------------------------------------------------------------ the view

    def newest(
        self, context: ChatContext, limit: int | None = None
    ) -> tuple[int, MessageNode] | None:
        """The newest summary on the active branch (its index and node), looking
        back at most ``limit`` messages (all by default)."""
        pool = context.message_pool
        ids = context.active_branch.message_ids
        stop = 0 if limit is None else max(0, len(ids) - limit)
        for i in range(len(ids) - 1, stop - 1, -1):
            node = pool[ids[i]]
            covers = summary_of(node)
            if covers is not None and _valid(covers, ids, i):
                return i, node
        return None

    def view(
        self, messages: list[dict[str, Any]], context: ChatContext
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The history view: ``messages`` (the branch in chat format, one per
        stored message) with the newest summary in place of what it covers, and
        the metadata to report (None when no summary is used)."""
        found = self.newest(context)
        if found is None:
            return messages, None
        at, node = found
        covers = summary_of(node)
        assert covers is not None
        count = covers["count"]
        pool = context.message_pool
        ids = context.active_branch.message_ids
        out: list[dict[str, Any]] = [
            {"role": "system", "content": summary_block(node.message.text, count)}
        ]
        for i in range(count, len(messages)):
            if i < len(ids) and summary_of(pool[ids[i]]) is not None:
                continue
            out.append(messages[i])
        return out, {"summary_id": node.id, "covers": count, "at": at}

    def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest:
        """The view of :meth:`view`, as an enhancer (the engine applies it to the
        history itself, before the other enhancers; given in ``enhancers=``, it
        expects the history as the first messages, with nothing put before it)."""
        request.messages, meta = self.view(request.messages, context)
        if meta is not None:
            request.metadata["compaction"] = meta
        return request

    # ------------------------------------------------------------------ the summary call

    def plan(self, messages: list[dict[str, Any]], context: ChatContext) -> CompactionPlan | None:
        """The next summary call, when the view is over the threshold; None when
        it is not (or nothing can be covered: every message left is in the
        newest turns to keep)."""
        factor = calibration(context)
        count = self.counter.count_message
        pool = context.message_pool
        ids = context.active_branch.message_ids
        n = min(len(messages), len(ids))
        threshold = self.threshold_tokens / factor
        found = self.newest(context)
        covered = 0
        previous: str | None = None
        total = 0
        if found is not None:
            covers = summary_of(found[1])
            assert covers is not None
            covered = covers["count"]
            previous = found[1].message.text
            total += count({"role": "system", "content": summary_block(previous, covered)})
        # back from the newest message to what is covered: the view's size, and
        # the newest turns worth keep_tokens (the current turn always)
        keep_limit = self.keep_tokens / factor
        tail = 0.0
        current: int | None = None
        keep_from = n
        for i in range(n - 1, covered - 1, -1):
            if summary_of(pool[ids[i]]) is not None:
                continue
            tail += count(messages[i])
            if messages[i].get("role") == "user":
                if current is None:
                    current = keep_from = i
                elif tail <= keep_limit:
                    keep_from = i
            if current is not None and total + tail > threshold and tail > keep_limit:
                break  # over the threshold, and past the turns to keep
        if current is None or total + tail <= threshold:
            return None
        end = keep_from
        if end <= covered:
            return None
        # the transcript: whole turns, at most max_summary_input tokens (one turn always)
        budget = self.max_summary_input / factor
        lines: list[str] = []
        used = 0.0
        stop = covered
        turn_lines: list[str] = []
        turn_cost = 0.0
        for i in range(covered, end):
            if summary_of(pool[ids[i]]) is not None:
                continue
            if messages[i].get("role") == "user" and turn_lines:
                if lines and used + turn_cost > budget:
                    break
                lines += turn_lines
                used += turn_cost
                stop = i
                turn_lines, turn_cost = [], 0.0
            turn_lines.append(_transcript_line(messages[i]))
            turn_cost += count(messages[i])
        else:
            if turn_lines and (not lines or used + turn_cost <= budget):
                lines += turn_lines
                stop = end
        if stop <= covered:
            return None
        parts = []
        if previous:
            parts.append(f"Summary so far:\n{previous}")
        parts.append("New messages:\n" + "\n".join(lines))
        return CompactionPlan(
            previous=previous,
            start=covered,
            end=stop,
            messages=[
                {"role": "system", "content": self.prompt},
                {"role": "user", "content": "\n\n".join(parts)},
            ],
        )


def _valid(covers: dict[str, Any], ids: list[str], at: int) -> bool:
    """A summary at index ``at`` of ``ids`` covers messages of this branch."""
    count = covers.get("count")
    last = covers.get("last_id")
    return isinstance(count, int) and 0 < count <= at and ids[count - 1] == last


def _transcript_line(message: dict[str, Any]) -> str:
    role = message.get("role")
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text", f"[{p.get('type')}]") for p in content)
    text = content or ""
    if role == "tool":
        if len(text) > RESULT_CHARS:
            text = text[:RESULT_CHARS] + f" [... {len(text) - RESULT_CHARS} more characters]"
        return f"tool result ({message.get('tool_call_id')}): {text}"
    if role == "assistant" and message.get("tool_calls"):
        calls = ", ".join(
            f"{c['function']['name']}({c['function']['arguments']})" for c in message["tool_calls"]
        )
        return f"assistant: {text + ' ' if text else ''}[calls {calls}]"
    who = message.get("name") or role
    return f"{who}: {text}"
