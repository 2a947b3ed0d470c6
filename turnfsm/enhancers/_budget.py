"""The token budget: the oldest turns leave the view until the request fits."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from ..errors import InvalidInput
from ..model import ChatContext, LLMRequest, Role

__all__ = [
    "BudgetExceeded",
    "EstimatingCounter",
    "TokenBudget",
    "TokenCounter",
    "calibration",
]

CALIBRATION_ANSWERS = 8
"""How many of the newest answers with a reported ``usage.prompt_tokens`` the
calibration averages over."""
CALIBRATION_SCAN = 128
"""How far back (in messages) the calibration looks for them."""
FACTOR_RANGE = (0.25, 8.0)
"""The calibration factor is held inside this range (a usage figure far outside
it is more likely wrong than the estimate)."""


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of the request view: one message, and the tool definitions."""

    def count_message(self, message: dict[str, Any]) -> int: ...

    def count_tools(self, tools: list[dict[str, Any]]) -> int: ...


class EstimatingCounter:
    """A fast estimate with no tokenizer: ``chars_per_token`` characters of text
    (content, tool names, arguments) make one token, plus ``per_message`` tokens
    for each message's framing; an image counts ``per_image`` tokens.

    It is the default counter of :class:`TokenBudget`, which calibrates it with
    the provider's reported ``usage.prompt_tokens`` (see :func:`calibration`).
    Its error on a realistic corpus is in docs/token-budget.md.
    """

    def __init__(
        self, chars_per_token: float = 4.0, per_message: int = 4, per_image: int = 765
    ) -> None:
        if not chars_per_token > 0:
            raise InvalidInput("chars_per_token", f"must be > 0, not {chars_per_token!r}")
        self.chars_per_token = chars_per_token
        self.per_message = per_message
        self.per_image = per_image
        self._tools_key: tuple[int, ...] = ()
        self._tools_count = 0
        self._tools_ref: list[dict[str, Any]] = []

    def count_message(self, message: dict[str, Any]) -> int:
        chars = 0
        fixed = self.per_message
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                kind = part.get("type")
                if kind == "text":
                    chars += len(part.get("text", ""))
                elif kind == "image_url":
                    fixed += self.per_image
                else:  # a file: its base64 data, decoded size
                    data = part.get("file", {}).get("file_data", "")
                    chars += len(data) * 3 // 4
        calls = message.get("tool_calls")
        if calls:
            for c in calls:
                fn = c["function"]
                chars += len(fn["name"]) + len(fn["arguments"]) + len(c["id"])
                fixed += 3
        name = message.get("name")
        if name:
            chars += len(name)
        call_id = message.get("tool_call_id")
        if call_id:
            chars += len(call_id)
        return fixed + math.ceil(chars / self.chars_per_token)

    def count_tools(self, tools: list[dict[str, Any]]) -> int:
        if not tools:
            return 0
        key = tuple(id(t) for t in tools)
        if key != self._tools_key:
            text = json.dumps(tools, separators=(",", ":"), ensure_ascii=False, default=str)
            self._tools_count = math.ceil(len(text) / self.chars_per_token)
            self._tools_key = key
            self._tools_ref = list(tools)  # keeps the ids of the key alive
        return self._tools_count


def calibration(context: ChatContext) -> float:
    """The factor from this counter's estimate to the provider's count.

    The engine stores what the budget estimated for each request with its
    answer (``metadata.extra["view"]["token_budget"]["raw_tokens"]``), beside
    the provider's ``usage.prompt_tokens``. The factor is their ratio summed
    over the newest :data:`CALIBRATION_ANSWERS` answers that have both (looking
    back at most :data:`CALIBRATION_SCAN` messages of the active branch), held in
    :data:`FACTOR_RANGE`; 1.0 before the first such answer. It reads only
    stored data, so a replay or a resumed context computes the same factor.
    """
    pool = context.message_pool
    ids = context.active_branch.message_ids
    real = 0
    estimated = 0
    found = 0
    for mid in reversed(ids[-CALIBRATION_SCAN:]):
        msg = pool[mid].message
        if msg.role is not Role.ASSISTANT:
            continue
        meta = msg.metadata
        usage = meta.usage
        if usage is None or usage.prompt_tokens <= 0:
            continue
        view = meta.extra.get("view")
        budget = view.get("token_budget") if isinstance(view, dict) else None
        raw = budget.get("raw_tokens") if isinstance(budget, dict) else None
        if not isinstance(raw, int) or isinstance(raw, bool) or raw <= 0:
            continue
        real += usage.prompt_tokens
        estimated += raw
        found += 1
        if found == CALIBRATION_ANSWERS:
            break
    if not found:
        return 1.0
    low, high = FACTOR_RANGE
    return min(high, max(low, real / estimated))


class BudgetExceeded(ValueError):
    """What must stay in the view (the system messages, the current user message
    and the newest tool round) does not fit the budget on its own."""


Shrink = Callable[[dict[str, Any]], dict[str, Any]]
_MEMO = 8192
"""Counts kept per budget (then the memo starts again)."""


class TokenBudget:
    """Drops the oldest turns from the view until the request fits.

    The request fits when the counted tokens of its messages and tool
    definitions, times the calibration factor (:func:`calibration`; ``calibrate=False``
    uses 1.0), plus ``reserve_output``, are at most ``max_input_tokens``.

    What always stays: the leading ``system`` messages (the system prompt, the
    branch's prompts, a summary, context blocks) and the current user message
    (the last ``user`` message of the view). What goes, oldest first: whole
    turns (a user message and everything up to the next one); when the current
    turn alone is too large, its oldest groups after the user message (an
    assistant message with all of its tool results is one group, never split).
    When what must stay does not fit by itself, :class:`BudgetExceeded` (the turn
    fails through ``prepare_failed``).

    The counter is pluggable (:class:`TokenCounter`); the default is
    :class:`EstimatingCounter`. The request's ``metadata["token_budget"]`` says what
    was counted and what was dropped.
    """

    def __init__(
        self,
        max_input_tokens: int,
        *,
        reserve_output: int = 0,
        counter: TokenCounter | None = None,
        calibrate: bool = True,
    ) -> None:
        for where, value in (
            ("max_input_tokens", max_input_tokens),
            ("reserve_output", reserve_output),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInput(where, f"must be an integer >= 0, not {value!r}")
        if reserve_output >= max_input_tokens:
            raise InvalidInput(
                "reserve_output",
                f"must be below max_input_tokens ({max_input_tokens}), not {reserve_output}",
            )
        if counter is not None and not isinstance(counter, TokenCounter):
            raise InvalidInput("counter", f"must have count_message and count_tools: {counter!r}")
        self.max_input_tokens = max_input_tokens
        self.reserve_output = reserve_output
        self.counter: TokenCounter = counter if counter is not None else EstimatingCounter()
        self.calibrate = calibrate
        # counts of the engine's message dicts, which are kept across requests (by
        # identity: the dict is held, so its id is not reused while it is here)
        self._counts: dict[int, tuple[dict[str, Any], int]] = {}
        self._small: dict[int, tuple[dict[str, Any], int]] = {}
        self._factor: tuple[tuple[str, int, str], float] | None = None

    def _count(self, message: dict[str, Any]) -> int:
        hit = self._counts.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        n = self.counter.count_message(message)
        if len(self._counts) >= _MEMO:
            self._counts.clear()
        self._counts[id(message)] = (message, n)
        return n

    def _count_small(self, message: dict[str, Any], shrink: Shrink) -> int:
        hit = self._small.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        n = self.counter.count_message(shrink(message))
        if len(self._small) >= _MEMO:
            self._small.clear()
        self._small[id(message)] = (message, n)
        return n

    @property
    def limit(self) -> int:
        """The tokens the messages and tools may take."""
        return self.max_input_tokens - self.reserve_output

    def factor(self, context: ChatContext) -> float:
        """The calibration factor for ``context`` now (1.0 with ``calibrate=False``)."""
        if not self.calibrate:
            return 1.0
        ids = context.active_branch.message_ids
        key = (context.id, len(ids), ids[-1] if ids else "")
        if self._factor is not None and self._factor[0] == key:
            return self._factor[1]
        factor = calibration(context)
        self._factor = (key, factor)
        return factor

    def window(
        self,
        messages: list[dict[str, Any]],
        context: ChatContext,
        shrink: Shrink | None = None,
        *,
        start_at: int = 0,
    ) -> int:
        """Where a view of ``messages`` (the history, before any enhancer) may
        start: every turn before it would be dropped by :meth:`enhance` anyway.

        Each message is counted at its smallest form (``shrink``: what a later
        enhancer may make of it), so the cut is never more than ``enhance``
        would make; it walks back only as far as the budget reaches, so
        preparing a request costs the same at 100 or 5,000 stored messages.
        Messages before ``start_at`` (those that always stay) are not looked at;
        the result is ``start_at`` when nothing is cut.
        """
        allowed = self.limit / self.factor(context)
        total = 0
        start = len(messages)
        pinned = True  # the current turn is always kept
        for i in range(len(messages) - 1, start_at - 1, -1):
            msg = messages[i]
            total += self._count_small(msg, shrink) if shrink is not None else self._count(msg)
            if msg.get("role") == "user":
                if pinned:
                    pinned = False
                elif total > allowed:
                    return start
                start = i
        return start_at if total <= allowed or pinned else start

    def enhance(self, request: LLMRequest, context: ChatContext) -> LLMRequest:
        messages = request.messages
        factor = self.factor(context)
        count = self._count
        allowed = self.limit / factor
        head = 0
        while head < len(messages) and messages[head].get("role") == "system":
            head += 1
        fixed = self.counter.count_tools(request.tools) + sum(count(m) for m in messages[:head])
        current = len(messages) - 1
        while current >= head and messages[current].get("role") != "user":
            current -= 1
        # the current turn: its user message stays; its groups go oldest first
        tail_start = current + 1 if current >= head else head
        groups = _groups(messages, tail_start, len(messages))
        used = fixed + (count(messages[current]) if current >= head else 0)
        keep_from = len(messages)
        for g_start, g_end in reversed(groups):
            cost = sum(count(m) for m in messages[g_start:g_end])
            if used + cost > allowed and keep_from < len(messages):
                break
            used += cost
            keep_from = g_start
        if used > allowed:
            raise BudgetExceeded(
                f"what must stay in the view takes about {math.ceil(used * factor)} tokens "
                f"(system messages, the current user message and the newest tool round), "
                f"over the budget of {self.limit} (max_input_tokens {self.max_input_tokens} "
                f"- reserve_output {self.reserve_output})"
            )
        start = current
        if current >= head and keep_from == tail_start:
            # the whole current turn stays: earlier turns, newest first, while they fit
            turn_end = current
            for i in range(current - 1, head - 1, -1):
                if messages[i].get("role") != "user" and i > head:
                    continue
                cost = sum(count(m) for m in messages[i:turn_end])
                if used + cost > allowed:
                    break
                used += cost
                start = i
                turn_end = i
        first_kept = start if current >= head else keep_from
        dropped = first_kept - head
        if current >= head:
            dropped += keep_from - tail_start
        if dropped:
            view = messages[:head]
            if current >= head:
                view += messages[first_kept : current + 1]
            view += messages[keep_from:]
            request.messages = view
        previous = request.metadata.get("token_budget", {})
        request.metadata["token_budget"] = {
            "max_input_tokens": self.max_input_tokens,
            "reserve_output": self.reserve_output,
            "raw_tokens": math.ceil(used),
            "factor": round(factor, 4),
            "tokens": math.ceil(used * factor),
            "dropped_messages": dropped + previous.get("dropped_messages", 0),
        }
        return request


def _groups(messages: list[dict[str, Any]], start: int, end: int) -> list[tuple[int, int]]:
    """``messages[start:end]`` as groups: an assistant message with the tool
    results after it, or one other message."""
    out: list[tuple[int, int]] = []
    i = start
    while i < end:
        j = i + 1
        if messages[i].get("role") == "assistant" and messages[i].get("tool_calls"):
            while j < end and messages[j].get("role") == "tool":
                j += 1
        out.append((i, j))
        i = j
    return out
