"""A context's branch as an OpenAI Chat Completions ``messages`` list, as
:func:`~turnfsm.adapters.inbound.import_openai_messages` reads it.

- The branch's system prompt (and its user prompt, joined by a blank line, as
  the engine sends them) is the first message, ``system``.
- Each message is :func:`~turnfsm.model.to_chat_message`'s form of it: text as
  a string (or text, ``image_url`` and ``file`` parts), assistant
  ``tool_calls`` with JSON-text arguments (the text the model sent when it was
  not a JSON object), ``tool`` messages with their ``tool_call_id`` and the
  result as text (a string as it is, any other value as JSON), a frontend
  operator as a ``user`` named ``frontend_operator``. A system message an import
  read from a ``developer`` message is ``developer`` again; an assistant's
  thinking is ``reasoning_content``.
- A result an import made up for a call that had none is not written (the
  import makes it again), nor is a call that has none yet given one. A result
  that answers no call of the assistant message just before it is left out.
- ``metadata.extra`` keys are written back as fields of the message they came
  from; a context imported from another format carries that format's kept
  fields into its messages, which a provider may refuse.
- When the first message keeps the other top-level fields of an imported
  ``{"messages": [...], "model": ...}`` object (``metadata.extra["source"]``),
  the export is that object again, with the context's model id as ``model``;
  otherwise it is the bare list.

What the format has no place for, and is left out: other branches,
timestamps, a result's ``success`` (an import reads every ``tool`` message as
a success), a result's type (an import reads it back as text), images and
files in assistant messages, approval decisions, message types, message
metadata other than ``extra``, and a top-level ``model`` of its own when the
context keeps no other top-level fields. A first system message with only
text is read back as the branch's system prompt.
"""

from __future__ import annotations

from typing import Any

from ....model import ChatContext, Role, to_chat_message
from ._common import extra_fields, is_synthesized, select_branch, source_fields, system_text

__all__ = [
    "export_openai_messages",
]

_TAKEN: dict[Role, tuple[str, ...]] = {
    Role.TOOL: ("role", "tool_call_id", "content"),
    # the import refuses the deprecated function_call: never written
    Role.ASSISTANT: ("role", "content", "tool_calls", "reasoning_content", "function_call"),
    Role.FRONTEND_OPERATOR: ("role", "content", "name"),
    Role.USER: ("role", "content"),
    Role.SYSTEM: ("role", "content"),
}


def export_openai_messages(
    ctx: ChatContext, *, branch: str | None = None
) -> list[dict[str, Any]] | dict[str, Any]:
    """The branch (the active one by default) as OpenAI chat messages (see the
    module docstring for what is written where, and what is left out)."""
    found, history = select_branch(ctx, branch)
    source = source_fields(history)
    out: list[dict[str, Any]] = []
    text = system_text(found)
    if text is not None:
        out.append({"role": "system", "content": text})
    # calls of the newest batch without a written result: a result answering
    # anything else (no call of the batch just before) has no place in the format
    unanswered: set[str] = set()
    for msg in history:
        if msg.role is Role.TOOL:
            done = msg.tool_result
            if done is None or done.request_id not in unanswered or is_synthesized(msg):
                continue
            unanswered.discard(done.request_id)
        else:
            unanswered = {c.id for c in msg.tool_calls or []}
        extra = msg.metadata.extra
        chat = to_chat_message(msg)
        taken = _TAKEN[msg.role]
        if msg.role is Role.SYSTEM and extra.get("openai_role") == "developer":
            chat["role"] = "developer"
            taken = (*taken, "openai_role")
        if msg.role is Role.ASSISTANT and msg.thinking is not None:
            chat["reasoning_content"] = msg.thinking
        chat |= extra_fields(extra, taken)
        out.append(chat)
    if not source:
        return out
    rest = {k: v for k, v in source.items() if k not in ("model", "messages")}
    return {"model": ctx.config.model_id, **rest, "messages": out}
