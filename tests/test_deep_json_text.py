"""JSON text from outside nested too deeply: refused the same way whatever the
process's recursion limit, so that the model's own text is what is kept.

Each test runs under Python's default recursion limit and under a raised one
(as some applications and test runners set): ``json.loads`` alone raises
RecursionError under the first and decodes under the second."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from turnfsm import Engine, tool
from turnfsm.adapters.inbound.importers._checks import tool_arguments
from turnfsm.adapters.llm._anthropic_body import anthropic_messages
from turnfsm.adapters.llm._anthropic_stream import MessagesStreamAssembler
from turnfsm.adapters.llm._gemini_body import gemini_contents
from turnfsm.adapters.llm._openai_chat import ChatStreamAssembler
from turnfsm.adapters.llm._openai_responses import responses_response
from turnfsm.adapters.llm.scripted import AnswerSpec
from turnfsm.engine._answer import RAW_ARGUMENTS_LIMIT
from turnfsm.engine._output import OutputInvalid, schema_output
from turnfsm.model import MAX_JSON_DEPTH, ChatContext, ToolCallRequest, ToolCallResult
from turnfsm.model._json import MAX_DOCUMENT_DEPTH, JSONTooDeep, loads_json
from turnfsm.storage import SQLiteStore
from turnfsm.testing import FakeClock, ScriptedLLM, SequentialIds


@pytest.fixture(params=[1000, 20_000], ids=["default-limit", "raised-limit"])
def recursion_limit(request: pytest.FixtureRequest) -> Iterator[int]:
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(request.param)
    yield request.param
    sys.setrecursionlimit(before)


pytestmark = pytest.mark.usefixtures("recursion_limit")


def nested_text(depth: int) -> str:
    """An object ``depth`` levels deep, as a model writes it (no spaces)."""
    return '{"a":' * (depth - 1) + '{"b":1}' + "}" * (depth - 1)


def nested_value(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"b": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


DEEP = nested_text(5000)  # deeper than the default limit lets json.loads go
JUST_TOO_DEEP = nested_text(MAX_JSON_DEPTH + 1)
DEEPEST = nested_text(MAX_JSON_DEPTH)


# ---------------------------------------------------------------------- the decoder


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 5000])
def test_a_text_deeper_than_the_rule_is_refused(depth: int) -> None:
    for text in (nested_text(depth), "[" * depth + "]" * depth, " [ " * depth + " ] " * depth):
        with pytest.raises(
            JSONTooDeep, match=rf"nested too deeply \(more than {MAX_JSON_DEPTH} levels\)"
        ):
            loads_json(text)
        with pytest.raises(JSONTooDeep):
            loads_json(text.encode())
        assert isinstance(JSONTooDeep(MAX_JSON_DEPTH), ValueError)  # caught as a decode error


def test_a_text_as_deep_as_the_rule_decodes() -> None:
    assert loads_json(DEEPEST) == nested_value(MAX_JSON_DEPTH)
    assert loads_json(DEEPEST.encode("utf-16")) == nested_value(MAX_JSON_DEPTH)
    wide = "[" + ",".join([nested_text(MAX_JSON_DEPTH - 1)] * 50) + "]"
    assert len(loads_json(wide)) == 50  # many brackets, none deeper than the rule


def test_brackets_inside_strings_are_not_depth() -> None:
    inside = "{" * 500 + "[" * 500 + '\\"' + "{" * 100 + "\\\\"
    text = '{"a": "' + inside + '", "b": ["\\u007b", "[[[", {"c": "}}}"}]}'
    assert loads_json(text) == {
        "a": "{" * 500 + "[" * 500 + '"' + "{" * 100 + "\\",
        "b": ["{", "[[[", {"c": "}}}"}],
    }


def test_a_document_has_its_own_bound() -> None:
    text = nested_text(MAX_DOCUMENT_DEPTH)
    assert loads_json(text, MAX_DOCUMENT_DEPTH) == nested_value(MAX_DOCUMENT_DEPTH)
    with pytest.raises(JSONTooDeep, match=f"more than {MAX_DOCUMENT_DEPTH} levels"):
        loads_json(nested_text(MAX_DOCUMENT_DEPTH + 1), MAX_DOCUMENT_DEPTH)


@pytest.mark.parametrize(
    "text", ['{"a": 1' + " " * 200, '"never closed' + "[" * 200, "]" * 100 + "[" * 10]
)
def test_text_that_is_not_json_is_still_a_decode_error(text: str) -> None:
    with pytest.raises(ValueError):
        loads_json(text)


# ---------------------------------------------------------------------- each provider's decoder


def _ids() -> Any:
    counter = itertools.count(1)
    return lambda: f"gen_{next(counter)}"


def _chat_arguments(text: str) -> object:
    asm = ChatStreamAssembler(_ids())
    call = {"index": 0, "id": "c1", "function": {"name": "f", "arguments": text}}
    for delta, finish in (({"tool_calls": [call]}, None), ({}, "tool_calls")):
        asm.feed(
            {
                "id": "x",
                "object": "chat.completion.chunk",
                "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )
    return asm.finish().tool_calls[0].arguments


def _responses_arguments(text: str) -> object:
    item = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": text}
    answer = responses_response({"id": "r", "status": "completed", "output": [item]}, _ids())
    return answer.tool_calls[0].arguments


def _anthropic_arguments(text: str) -> object:
    asm = MessagesStreamAssembler(_ids())
    for event in (
        {"type": "message_start", "message": {"model": "m", "usage": {}}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "c1", "name": "f", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": text},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
        {"type": "message_stop"},
    ):
        asm.feed(event)
    return asm.finish().tool_calls[0].arguments


def _scripted_arguments(text: str) -> object:
    spec = AnswerSpec.parse({"tool_calls": [{"id": "c1", "name": "f", "arguments": text}]})
    return spec.response().tool_calls[0].arguments


DECODERS = {
    "scripted": _scripted_arguments,
    "openai-chat": _chat_arguments,
    "openai-responses": _responses_arguments,
    "anthropic": _anthropic_arguments,
}


@pytest.mark.parametrize("family", list(DECODERS))
def test_each_adapter_keeps_the_text_of_arguments_too_deep(family: str) -> None:
    decode = DECODERS[family]
    assert decode(DEEP) == DEEP
    assert decode(JUST_TOO_DEEP) == JUST_TOO_DEEP
    assert decode(DEEPEST) == nested_value(MAX_JSON_DEPTH)


def _stored_call(arguments: str, result: str) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
    ]


def test_gemini_sends_text_too_deep_as_text() -> None:
    _, contents = gemini_contents(_stored_call(DEEP, JUST_TOO_DEEP))
    (call,) = [p["functionCall"] for c in contents for p in c["parts"] if "functionCall" in p]
    (reply,) = [
        p["functionResponse"] for c in contents for p in c["parts"] if "functionResponse" in p
    ]
    assert call["args"] == {}
    assert reply["response"] == {"result": JUST_TOO_DEEP}
    _, contents = gemini_contents(_stored_call(DEEPEST, DEEPEST))
    (call,) = [p["functionCall"] for c in contents for p in c["parts"] if "functionCall" in p]
    (reply,) = [
        p["functionResponse"] for c in contents for p in c["parts"] if "functionResponse" in p
    ]
    assert call["args"] == reply["response"] == nested_value(MAX_JSON_DEPTH)


def test_anthropic_sends_stored_arguments_too_deep_as_no_input() -> None:
    for text, sent in ((DEEP, {}), (JUST_TOO_DEEP, {}), (DEEPEST, nested_value(MAX_JSON_DEPTH))):
        _, messages = anthropic_messages(_stored_call(text, "ok"))
        (use,) = [b for m in messages for b in m["content"] if b["type"] == "tool_use"]
        assert use["input"] == sent


def test_an_imported_call_keeps_the_text_too_deep() -> None:
    assert tool_arguments(DEEP, "$.arguments") == ({}, DEEP)
    assert tool_arguments(JUST_TOO_DEEP, "$.arguments") == ({}, JUST_TOO_DEEP)
    assert tool_arguments(DEEPEST, "$.arguments") == (nested_value(MAX_JSON_DEPTH), None)


def test_a_typed_answer_too_deep_is_sent_back_as_invalid() -> None:
    typed = schema_output({"type": "object"})
    for text in (DEEP, JUST_TOO_DEEP):
        with pytest.raises(OutputInvalid) as info:
            typed.validate(text)
        assert info.value.problems == (
            ("$", f"nested too deeply (more than {MAX_JSON_DEPTH} levels)"),
        )
    assert typed.validate(DEEPEST) == nested_value(MAX_JSON_DEPTH)


# ---------------------------------------------------------------------- whole documents


def _replay_script(file: Path) -> object:
    from turnfsm.replay._script import load_script

    return load_script(file)


def _session_file(file: Path) -> object:
    from turnfsm.adapters.inbound.importers._session_folder import read_session_file

    return read_session_file(file)


def _context_folder_file(file: Path) -> object:
    from turnfsm.adapters.inbound.importers._context_folder import _read_json

    return _read_json(file)


def _files_store_document(file: Path) -> object:
    from turnfsm.storage._files_json import _json_document

    return _json_document(file.read_bytes(), file)


def _audit_log(file: Path) -> object:
    from turnfsm.audit import records_from_audit_lines

    return records_from_audit_lines(file.read_text().splitlines())


def _audit_path(file: Path) -> object:
    from turnfsm.render import path_from_audit_lines

    return path_from_audit_lines(file.read_text().splitlines())


def _audit_verify(file: Path) -> object:
    from turnfsm.audit import verify_audit_log

    return verify_audit_log(file.read_text().splitlines())


READERS = {
    "replay-script": _replay_script,
    "session-file": _session_file,
    "context-folder-file": _context_folder_file,
    "files-store-document": _files_store_document,
    "audit-log": _audit_log,
    "audit-path": _audit_path,
    "audit-verify": _audit_verify,
}


@pytest.mark.parametrize("reader", list(READERS))
def test_a_document_too_deep_is_refused_in_the_same_words(reader: str, tmp_path: Path) -> None:
    file = tmp_path / "c1.json"
    file.write_text(nested_text(5000))
    with pytest.raises(
        Exception, match=rf"nested too deeply \(more than {MAX_DOCUMENT_DEPTH}"
    ) as info:
        READERS[reader](file)
    assert not isinstance(info.value, RecursionError)


def test_a_foreign_folder_too_deep_is_not_taken_for_one(tmp_path: Path) -> None:
    from turnfsm.storage._files_foreign import is_foreign

    (tmp_path / "metadata.json").write_text(nested_text(5000))
    assert is_foreign(tmp_path) is False
    (tmp_path / "metadata.json").write_text(nested_text(MAX_DOCUMENT_DEPTH))
    assert is_foreign(tmp_path) is True


def test_a_request_body_too_deep_is_left_to_the_framework() -> None:
    from turnfsm.server._hot import _message

    assert _message(b'{"content": "hi"}') is not None
    deep = b'{"content": "hi", "metadata": ' + nested_text(5000).encode() + b"}"
    assert _message(deep) is None


# ---------------------------------------------------------------------- through the engine

kept: list[dict[str, Any]] = []


@tool
def keep(a: dict[str, Any]) -> str:
    """Keep what it is given (runs without asking)."""
    kept.append(a)
    return "kept"


def _engine(path: Path, llm: ScriptedLLM, prefix: str = "a-") -> Engine:
    return Engine(
        llm=llm,
        tools=[keep],
        store=SQLiteStore(path),
        clock=FakeClock(),
        ids=SequentialIds(prefix),
    )


async def _one_call(tmp_path: Path, arguments: str) -> tuple[ToolCallRequest, ToolCallResult]:
    kept.clear()
    llm = ScriptedLLM(
        [{"tool_calls": [{"id": "c1", "name": "keep", "arguments": arguments}]}, {"text": "ok"}]
    )
    db = tmp_path / "c.db"
    async with _engine(db, llm) as engine:
        cid = await engine.create_context()
        await engine.send(cid, "go")
    async with _engine(db, ScriptedLLM([]), "b-") as engine:  # as stored
        ctx: ChatContext = await engine.get_context(cid)
    (call,) = [c for n in ctx.history() for c in n.message.tool_calls or ()]
    (result,) = [r for n in ctx.history() if (r := n.message.tool_result) is not None]
    return call, result


@pytest.mark.anyio
async def test_argument_text_nested_too_deeply_to_decode_is_an_error_result(
    tmp_path: Path,
) -> None:
    call, result = await _one_call(tmp_path, DEEP)
    cut = f"{DEEP[:RAW_ARGUMENTS_LIMIT]}… [cut: {len(DEEP)} characters in all]"
    assert (call.arguments, call.raw_arguments) == ({}, cut)
    assert result.success is False
    assert result.result == {
        "error": "invalid arguments for tool 'keep': not a JSON object",
        "raw": cut,
    }
    assert kept == []


@pytest.mark.anyio
async def test_arguments_one_level_too_deep_are_kept_as_the_model_wrote_them(
    tmp_path: Path,
) -> None:
    call, result = await _one_call(tmp_path, JUST_TOO_DEEP)
    assert (call.arguments, call.raw_arguments) == ({}, JUST_TOO_DEEP)
    assert result.success is False and result.result["raw"] == JUST_TOO_DEEP
    assert kept == []


@pytest.mark.anyio
async def test_arguments_as_deep_as_the_rule_are_used(tmp_path: Path) -> None:
    call, result = await _one_call(tmp_path, DEEPEST)
    assert (call.arguments, call.raw_arguments) == (nested_value(MAX_JSON_DEPTH), None)
    assert result.success is True
    assert kept == [nested_value(MAX_JSON_DEPTH - 1)]
