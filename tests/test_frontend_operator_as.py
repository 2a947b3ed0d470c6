"""``ChatConfig.frontend_operator_as``: who sets it, what is stored for it (nothing
for a context that does not set it), and the view's mapping."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from kit import make_engine

from turnfsm.adapters.inbound import import_request_body
from turnfsm.errors import InvalidInput
from turnfsm.model import ChatConfig, frontend_operator_as_assistant
from turnfsm.records import from_json, to_json

FIXTURES = Path(__file__).parent / "fixtures" / "import"


def stored_configs(db: Path) -> dict[str, dict[str, Any]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT id, config FROM contexts").fetchall()
    return {cid: json.loads(config) for cid, config in rows}


@pytest.mark.anyio
async def test_only_a_context_that_sets_it_stores_it(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    engine, _, _ = make_engine([{"text": "ok"}], store=f"sqlite:///{db}")
    body = json.loads((FIXTURES / "request_frontend_operator.json").read_text())
    async with engine:
        plain = await engine.create_context()
        user = await engine.create_context(frontend_operator_as="user")
        made = (await engine.send_request(body)).context_id
        loaded = await engine.get_context(made)
    configs = stored_configs(db)
    assert "frontend_operator_as" not in configs[plain]  # the bytes of before
    assert configs[plain] == json.loads(to_json(ChatConfig(model_id="scripted")))
    assert configs[user]["frontend_operator_as"] == "user"
    assert configs[made]["frontend_operator_as"] == "assistant"
    assert loaded.config.frontend_operator_as == "assistant"


def test_the_config_round_trips_and_refuses_other_roles() -> None:
    config = ChatConfig(frontend_operator_as="assistant")
    assert from_json(ChatConfig, to_json(config)) == config
    assert b"frontend_operator_as" not in to_json(ChatConfig())
    with pytest.raises(ValueError, match="frontend_operator_as"):
        from_json(ChatConfig, b'{"frontend_operator_as": "system"}')


@pytest.mark.anyio
async def test_create_context_refuses_another_role() -> None:
    engine, _, _ = make_engine()
    async with engine:
        with pytest.raises(InvalidInput) as info:
            await engine.create_context(frontend_operator_as="system")  # type: ignore[arg-type]
    assert info.value.where == "frontend_operator_as"


def test_an_imported_request_body_is_a_context_of_the_request_formats() -> None:
    body = json.loads((FIXTURES / "request_frontend_operator.json").read_text())
    ctx = import_request_body(body)
    assert ctx.config.frontend_operator_as == "assistant"
    formats = {n.message.metadata.extra["request_format"] for n in ctx.history()}
    assert formats == {"context_management"}


def test_the_mapping_keeps_the_given_list_and_what_an_assistant_cannot_carry() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "user", "name": "frontend_operator", "content": "opened the cart"},
        {"role": "user", "name": "frontend_operator", "content": [{"type": "text", "text": "a"}]},
        {"role": "user", "name": "frontend_operator", "content": [image]},
        {"role": "user", "name": "ann", "content": "named"},
    ]
    before = json.dumps(messages)
    out = frontend_operator_as_assistant(messages)
    assert json.dumps(messages) == before  # the engine's own list is left as it is
    assert out == [
        messages[0],
        {"role": "assistant", "content": "opened the cart"},
        {"role": "assistant", "content": "a"},
        messages[3],
        messages[4],
    ]
    plain = [{"role": "user", "content": "hi"}]
    assert frontend_operator_as_assistant(plain) is plain
