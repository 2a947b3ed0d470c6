"""Keys the request formats do not know: ignored on ``send_request`` (as the
formats' own schema objects drop them), logged once per key path and format,
never stored; refused by the request body import; wrong types and missing
fields refused as before. The bodies are the formats' own examples."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import structlog
from kit import make_engine
from structlog.testing import capture_logs

from turnfsm.adapters.inbound import detect_format, import_request_body, parse_request
from turnfsm.adapters.inbound._unknown_keys import UNKNOWN_KEYS, UnknownKeys
from turnfsm.errors import InvalidInput

FIXTURES = Path(__file__).parent / "fixtures" / "import"
SECRET = "do-not-store-7f3a"
"""The value of every unknown key: found nowhere in what is stored."""


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text("utf-8"))
    return data


def cm_with_extras() -> dict[str, Any]:
    """The format's contextManagement example with an unknown key at each level."""
    body = load("request_context_management.json")
    body["sessionId"] = SECRET
    body["stream"] = True
    cm = body["contextManagement"]
    cm["threadId"] = SECRET
    cm["currentMessage"]["attachments"] = [SECRET]
    for m in cm["conversationContext"]:
        m["id"] = SECRET
    return body


def legacy_with_extras() -> dict[str, Any]:
    """The format's legacy example: each message with an ``id``, and
    ``"stream": true`` at the top."""
    body = load("request_legacy.json")
    body["stream"] = True
    for m in body["messages"]:
        m["id"] = SECRET
    return body


CM_PATHS = [
    "sessionId",
    "stream",
    "contextManagement.threadId",
    "contextManagement.currentMessage.attachments",
    "contextManagement.conversationContext[].id",
]
LEGACY_PATHS = ["stream", "messages[].id"]


@pytest.fixture(autouse=True)
def _fresh_record() -> None:
    UNKNOWN_KEYS.clear()


def logged(entries: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["format"], e["key"]) for e in entries if e["event"] == "request_body_unknown_key"]


# --- parsing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "extras"),
    [
        ("request_context_management.json", cm_with_extras),
        ("request_legacy.json", legacy_with_extras),
        ("request_frontend_operator.json", None),
    ],
)
def test_unknown_keys_change_nothing_that_is_parsed(name: str, extras: Any) -> None:
    clean = load(name)
    body = extras() if extras is not None else copy.deepcopy(clean)
    if extras is None:  # the operator example, an extra key at every level
        body["x"] = SECRET
        body["contextManagement"]["x"] = SECRET
        body["contextManagement"]["currentMessage"]["x"] = SECRET
        body["contextManagement"]["conversationContext"][0]["x"] = SECRET
    parsed = parse_request(body)
    assert parsed == parse_request(clean)
    assert SECRET not in parsed.model_dump_json()


def test_wrong_types_and_missing_fields_are_still_refused_with_their_path() -> None:
    body = legacy_with_extras()
    body["messages"][1]["content"] = 42
    with pytest.raises(InvalidInput, match=r"messages\[1\]\.content: Input should be a valid"):
        parse_request(body)
    body = cm_with_extras()
    del body["contextManagement"]["currentMessage"]["role"]
    with pytest.raises(InvalidInput, match=r"contextManagement\.currentMessage\.role: Field"):
        parse_request(body)
    body = cm_with_extras()
    body["userTimezone"] = 2
    with pytest.raises(InvalidInput, match=r"userTimezone: Input should be a valid string"):
        parse_request(body)


def test_a_body_in_both_formats_is_refused() -> None:
    body = {**load("request_context_management.json"), "messages": [{"role": "user"}]}
    with pytest.raises(InvalidInput, match="has both contextManagement and messages") as info:
        parse_request(body)
    assert info.value.where == "request body"


def test_refuse_names_the_unknown_key_by_its_json_path() -> None:
    with pytest.raises(InvalidInput) as info:
        parse_request(legacy_with_extras(), unknown="refuse")
    assert info.value.where == "stream"
    body = load("request_context_management.json")
    body["contextManagement"]["conversationContext"][1]["id"] = "x"
    with pytest.raises(InvalidInput) as info:
        parse_request(body, unknown="refuse")
    assert info.value.where == "contextManagement.conversationContext[1].id"
    assert "is not a key of a contextManagement body" in str(info.value)
    with pytest.raises(InvalidInput, match="must be 'ignore' or 'refuse'"):
        parse_request(body, unknown="drop")  # type: ignore[arg-type]


def test_the_request_body_import_still_refuses_unknown_keys() -> None:
    with pytest.raises(InvalidInput) as info:
        import_request_body(legacy_with_extras())
    assert info.value.where == "stream"


def test_an_openai_messages_list_with_names_is_still_told_apart() -> None:
    openai = {"messages": [{"role": "user", "content": "hi", "name": "ann"}]}
    assert detect_format(openai) == "openai"
    assert detect_format(load("request_legacy.json")) == "request"


def test_an_odd_or_long_key_is_shown_quoted_and_cut() -> None:
    body = load("request_legacy.json")
    body["a b"] = 1
    body["k" * 500] = 1
    with capture_logs() as entries:
        parse_request(body, log=structlog.get_logger())
    keys = [key for _, key in logged(entries)]
    assert keys[0] == '["a b"]'
    assert keys[1] == '["' + "k" * 120 + '..."]'


# --- logged once, bounded -----------------------------------------------------------------


def test_each_key_path_is_logged_once_per_format() -> None:
    log = structlog.get_logger()
    with capture_logs() as entries:
        for _ in range(3):
            parse_request(cm_with_extras(), log=log)
            parse_request(legacy_with_extras(), log=log)
        parse_request(load("request_legacy.json"), log=log)  # none: nothing logged
    assert logged(entries) == [
        *[("context_management", p) for p in CM_PATHS],
        *[("legacy", p) for p in LEGACY_PATHS],
    ]
    assert all(SECRET not in json.dumps(e, default=str) for e in entries)


def test_without_a_log_nothing_is_remembered() -> None:
    parse_request(cm_with_extras())  # /api/chat's early check: the engine logs
    assert len(UNKNOWN_KEYS) == 0


def test_the_record_of_logged_keys_is_bounded() -> None:
    record = UnknownKeys(limit=3)
    with capture_logs() as entries:
        record.report(structlog.get_logger(), "legacy", ["a", "b"])
        record.report(structlog.get_logger(), "legacy", ["a", "c", "d", "e"])
        record.report(structlog.get_logger(), "legacy", ["f", "a"])
    assert len(record) == 3
    assert logged(entries) == [("legacy", "a"), ("legacy", "b"), ("legacy", "c")]
    full = [e for e in entries if e["event"] == "request_body_unknown_keys_unlogged"]
    assert len(full) == 1 and full[0]["remembered"] == 3


# --- send_request -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_send_request_answers_ignores_and_stores_none_of_them(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    engine, llm, _ = make_engine(
        [{"text": "Done."}, {"text": "Done again."}],
        store=f"sqlite:///{db}",
        logger=structlog.get_logger(),
    )
    with capture_logs() as entries:
        async with engine:
            cm = await engine.send_request(cm_with_extras())
            legacy = await engine.send_request(legacy_with_extras())
            stored = [await engine.get_context(t.context_id) for t in (cm, legacy)]
    assert [t.text for t in (cm, legacy)] == ["Done.", "Done again."]
    assert [len(c.history()) for c in stored] == [4, 4]
    assert [(f, k) for f, k in logged(entries)] == [
        *[("context_management", p) for p in CM_PATHS],
        *[("legacy", p) for p in LEGACY_PATHS],
    ]
    assert SECRET.encode() not in db.read_bytes()
    assert all(SECRET not in json.dumps(r.messages) for r in llm.requests)
