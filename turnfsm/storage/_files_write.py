"""The texts the files store writes: ``metadata.json``, ``message_index.json``
and message files byte for byte as a JSON encoder with indenting writes them
(the long id lists and index entries made by hand, once per message), and the
records a commit appends to ``commits.jsonl``."""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import StoreError
from ..model import SCHEMA_VERSION, ChatContext, InternalMessage, MessageNode
from ..records import to_python
from ._files_json import _safe_name


def _record_text(
    ctx: ChatContext,
    detached: list[str],
    steps_bytes: int,
    branches: Mapping[str, list[str]],
    appended: Sequence[tuple[str, MessageNode]],
    replaced: Sequence[MessageNode],
) -> bytes:
    """A record of ``commits.jsonl``, one line (read back as
    :class:`~turnfsm.storage._files_records._TailRecord`)."""
    empty = {name: dataclasses.replace(b, message_ids=[]) for name, b in ctx.branches.items()}
    small = dataclasses.replace(ctx, branches=empty, message_pool={})
    doc = {
        "version": ctx.version,
        "metadata": {
            "schema_version": SCHEMA_VERSION,
            **to_python(small, exclude={"message_pool"}),
            "detached_message_ids": detached,
            "steps_bytes": steps_bytes,
        },
        "branches": branches,
        "appended": [[name, node.id, *_entry(node.message)] for name, node in appended],
        "replaced": [[node.id, *_entry(node.message)] for node in replaced],
    }
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), default=str)
    return text.encode() + b"\n"


def _entry(msg: InternalMessage) -> list[str]:
    """A message's role, type and time as ``message_index.json`` lists them."""
    return [str(msg.role), str(msg.message_type), msg.metadata.created_at.isoformat()]


# ---------------------------------------------------------------------- writing


def _dumps(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, indent=2, default=str).encode() + b"\n"


def _metadata_of(ctx: ChatContext, steps_bytes: int) -> dict[str, Any]:
    data = to_python(ctx, exclude={"message_pool"})
    on_branches = {m for b in ctx.branches.values() for m in b.message_ids}
    return {
        "schema_version": SCHEMA_VERSION,
        **data,
        "detached_message_ids": [m for m in ctx.message_pool if m not in on_branches],
        "steps_bytes": steps_bytes,
    }


def _json_str(text: str) -> str:
    """A string as ``_dumps`` writes it (the same encoder: ``ensure_ascii=False``)."""
    return json.dumps(text, ensure_ascii=False)


def _index_head(mid: str, msg: InternalMessage) -> str:
    """A message's entry in ``message_index.json`` up to its branch, as ``_dumps``
    writes it inside the ``messages`` list (made by hand: the indenting encoder
    is pure Python, and this runs once per message, not per commit)."""
    return (
        f'    {{\n      "id": {_json_str(mid)},\n      "role": {_json_str(str(msg.role))},\n'
        f'      "message_type": {_json_str(str(msg.message_type))},\n'
        f'      "created_at": {_json_str(msg.metadata.created_at.isoformat())},\n'
        '      "branch": '
    )


def _index_tail(branch: str) -> str:
    """What ends an entry of ``branch`` (see :func:`_index_head`)."""
    return f"{_json_str(branch)}\n    }}"


def _index_text(entries: Sequence[bytes | bytearray]) -> bytes:
    """``message_index.json`` from its entries, each branch's joined with ``",\\n"``."""
    parts = [part for part in entries if part]
    if not parts:
        return b'{\n  "messages": []\n}\n'
    return b"".join([b'{\n  "messages": [\n', b",\n".join(parts), b"\n  ]\n}\n"])


def _index_of(ctx: ChatContext) -> bytes:
    pool = ctx.message_pool
    heads = {mid: _index_head(mid, node.message) for mid, node in pool.items()}
    return _index_text(
        [
            ",\n".join([heads[mid] + tail for mid in branch.message_ids]).encode()
            for tail, branch in ((_index_tail(name), b) for name, b in ctx.branches.items())
        ]
    )


def _id_line(mid: str) -> bytes:
    """A message id as a line of a ``message_ids`` list in ``metadata.json``."""
    return f"        {_json_str(mid)}".encode()


def _metadata_text(
    ctx: ChatContext, ids: Mapping[str, bytes | bytearray], detached: list[str], steps_bytes: int
) -> bytes:
    """``_dumps(_metadata_of(ctx, steps_bytes))``, byte for byte, without encoding
    every message id again: ``ids`` holds each branch's ``message_ids`` lines
    already encoded and joined with ``",\\n"`` (:func:`_id_line`); the rest of
    the document is small. ``ctx.message_pool`` is not used."""
    empty = {name: dataclasses.replace(b, message_ids=[]) for name, b in ctx.branches.items()}
    head = dataclasses.replace(ctx, branches=empty, message_pool={})
    data = to_python(head, exclude={"message_pool"})
    token = f"turnfsm-ids-{secrets.token_hex(8)}"
    for i, name in enumerate(ctx.branches):
        data["branches"][name]["message_ids"] = f"{token}-{i}"
    doc = {
        "schema_version": SCHEMA_VERSION,
        **data,
        "detached_message_ids": detached,
        "steps_bytes": steps_bytes,
    }
    text = (json.dumps(doc, ensure_ascii=False, indent=2, default=str) + "\n").encode()
    parts: list[bytes | bytearray] = []
    at = 0
    for i, name in enumerate(ctx.branches):
        mark = f'"{token}-{i}"'.encode()
        found = text.find(mark, at)
        if found < 0 or text.find(mark, found + 1) >= 0:  # cannot happen: a random token
            raise StoreError(f"cannot write the metadata of context {ctx.id!r}")
        listed = ids[name]
        parts.append(text[at:found])
        parts += [b"[\n", listed, b"\n      ]"] if listed else [b"[]"]
        at = found + len(mark)
    parts.append(text[at:])
    return b"".join(parts)


def _message_file(node: MessageNode) -> tuple[str, bytes]:
    if not _safe_name(node.id):
        raise StoreError(f"message id {node.id!r} cannot be a file name")
    data = {"schema_version": SCHEMA_VERSION, **to_python(node)}
    return f"messages/{node.id}.json", _dumps(data)
