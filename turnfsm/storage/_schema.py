"""Schema versions of stored records, and the upcasters that bring old ones up to date.

Every record a store writes carries the schema version it was written with
(:data:`~turnfsm.model.SCHEMA_VERSION`). There are three kinds of record:

* a **context** record: the context's own fields (id, state, version, config,
  progress, timestamps, ...), without its messages and branches;
* a **branch** record: one :class:`~turnfsm.model.Branch` (its ``message_ids``
  may be stored beside it, as the backend likes);
* a **message** record: one :class:`~turnfsm.model.MessageNode`.

On read, a record of the current version is used as it is. An older one is
brought up to date by the registered upcasters, one version step at a time
(``v -> v + 1``), each a pure function on the record's JSON dict. A newer one
is refused with :class:`~turnfsm.errors.SchemaVersionError` naming where it was
found; a version with no upgrade path (below 1, or a missing step) is a
:class:`~turnfsm.errors.StoreError`. Nothing here writes: a store keeps old
records as they are until it writes them again (at the current version).

Today only version 1 exists, so every chain is empty. A release that changes
a stored shape bumps ``SCHEMA_VERSION`` and registers its step here::

    @CONTEXT_UPCASTERS.register(1)
    def _context_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
        data["new_field"] = data.pop("old_field")
        return data

and adds a fixture record of the old version under ``tests/storage/fixtures/``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from .. import records
from ..errors import SchemaVersionError, StoreError
from ..model import SCHEMA_VERSION, ChatContext, MessageNode
from ..states import State

__all__ = [
    "BRANCH_UPCASTERS",
    "CONTEXT_UPCASTERS",
    "MESSAGE_UPCASTERS",
    "Upcaster",
    "UpcasterChain",
    "check_version",
    "context_from_document",
    "context_problems",
    "json_object_column",
    "json_path",
    "message_from_record",
    "step_detail_column",
    "summary_of_config",
    "upcast_branch",
    "upcast_context",
    "upcast_message",
    "validation_problem",
]

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
"""One step: a record of version ``v`` (as a JSON dict) in, the same record at ``v + 1`` out."""


def check_version(version: object, *, where: str, current: int | None = None) -> int:
    """The record's version as an int, or raise: newer than ``current`` (by
    default :data:`SCHEMA_VERSION`) is a :class:`SchemaVersionError`; not a
    positive int is a :class:`StoreError`."""
    if current is None:
        current = SCHEMA_VERSION
    if isinstance(version, bool) or not isinstance(version, int):
        raise StoreError(f"{where}: the record has no valid schema version (found {version!r})")
    if version > current:
        raise SchemaVersionError(where, version, current)
    if version < 1:
        raise StoreError(f"{where}: unknown schema version {version} (versions start at 1)")
    return version


class UpcasterChain:
    """The upcasters of one kind of record, keyed by the version they read."""

    def __init__(self, kind: str, current: int = SCHEMA_VERSION) -> None:
        self.kind = kind
        self.current = current
        self._steps: dict[int, Upcaster] = {}

    def register(self, from_version: int) -> Callable[[Upcaster], Upcaster]:
        """Decorator: register the step from ``from_version`` to ``from_version + 1``."""
        if not 1 <= from_version < self.current:
            raise ValueError(
                f"a {self.kind} upcaster reads a version from 1 to {self.current - 1}, "
                f"not {from_version}"
            )

        def add(fn: Upcaster) -> Upcaster:
            if from_version in self._steps:
                raise ValueError(f"a {self.kind} upcaster from version {from_version} exists")
            self._steps[from_version] = fn
            return fn

        return add

    def upcast(self, data: dict[str, Any], version: int, *, where: str) -> dict[str, Any]:
        """``data`` (a record of ``version``) brought up to the current version."""
        v = check_version(version, where=where, current=self.current)
        while v < self.current:
            step = self._steps.get(v)
            if step is None:
                raise StoreError(
                    f"{where}: no upgrade of {self.kind} records from schema version {v} to {v + 1}"
                )
            try:
                data = step(data)
            except Exception as exc:
                raise StoreError(
                    f"{where}: upgrading the {self.kind} record from schema version {v} "
                    f"failed: {type(exc).__name__}: {exc}"
                ) from exc
            v += 1
        return data


CONTEXT_UPCASTERS = UpcasterChain("context")
BRANCH_UPCASTERS = UpcasterChain("branch")
MESSAGE_UPCASTERS = UpcasterChain("message")


def upcast_context(
    data: dict[str, Any], version: int, *, where: str = "context record"
) -> dict[str, Any]:
    """A context record (a dict of :class:`ChatContext` fields) at the current version."""
    return CONTEXT_UPCASTERS.upcast(data, version, where=where)


def upcast_branch(
    data: dict[str, Any], version: int, *, where: str = "branch record"
) -> dict[str, Any]:
    """A branch record (a dict of :class:`Branch` fields) at the current version."""
    return BRANCH_UPCASTERS.upcast(data, version, where=where)


def upcast_message(
    data: dict[str, Any], version: int, *, where: str = "message record"
) -> dict[str, Any]:
    """A message record (a dict of :class:`MessageNode` fields) at the current version."""
    return MESSAGE_UPCASTERS.upcast(data, version, where=where)


def message_from_record(body: str | bytes, version: int, *, where: str) -> MessageNode:
    """A stored message (JSON text written by ``records.to_json``) of ``version``.

    The current version is parsed straight from the text; an older one goes
    through the upcasters first.
    """
    v = check_version(version, where=where)
    try:
        if v == SCHEMA_VERSION:
            return records.from_json(MessageNode, body)
        data = _json_object(body, where=where)
        return records.from_python(MessageNode, upcast_message(data, v, where=where))
    except ValidationError as exc:
        raise StoreError(f"{where}: not a valid message record: {validation_problem(exc)}") from exc


def context_from_document(document: str | bytes | dict[str, Any], *, where: str) -> ChatContext:
    """A whole context as one JSON document (what ``records.to_json``
    writes of a context: its own ``schema_version``, ``branches`` and ``message_pool``).

    Its branches and messages are of the document's version: each goes through
    its own upcasters, then the context record through the context upcasters.
    """
    data = document if isinstance(document, dict) else _json_object(document, where=where)
    version = check_version(data.get("schema_version"), where=where)
    if version != SCHEMA_VERSION:
        pool = data.get("message_pool")
        if isinstance(pool, dict):
            data["message_pool"] = {
                mid: upcast_message(node, version, where=f"{where}, message {mid!r}")
                for mid, node in pool.items()
            }
        branches = data.get("branches")
        if isinstance(branches, dict):
            data["branches"] = {
                name: upcast_branch(b, version, where=f"{where}, branch {name!r}")
                for name, b in branches.items()
            }
        data = upcast_context(data, version, where=where)
        data["schema_version"] = SCHEMA_VERSION
    try:
        return records.from_python(ChatContext, data)
    except ValidationError as exc:
        raise StoreError(f"{where}: not a valid context record: {validation_problem(exc)}") from exc


def _json_object(text: str | bytes, *, where: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StoreError(f"{where}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise StoreError(f"{where}: expected a JSON object, found {type(data).__name__}")
    return data


# ---------------------------------------------------------------------- damage

_STATES = frozenset(s.value for s in State)


def step_problem(from_state: str, to_state: str) -> str | None:
    """What is wrong with a stored step's states (``None`` when both are known).

    Triggers are not checked: the audit trail keeps them as they were named
    when the step was taken."""
    for field, value in (("from_state", from_state), ("to_state", to_state)):
        if value not in _STATES:
            return f"{field}: {value!r} is not a known state"
    return None


_PLAIN_KEY = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def json_path(loc: tuple[str | int, ...] | list[str | int]) -> str:
    """A pydantic error location (or any key path) as a JSON path:
    ``$.branches.main.message_ids[2]``."""
    out = "$"
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part and set(part) <= _PLAIN_KEY:
            out += f".{part}"
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out


def validation_problem(exc: ValidationError, limit: int = 3) -> str:
    """The first errors of a pydantic ``ValidationError`` as ``$.path: message``, one per
    place (what a :class:`StoreError` says of a damaged record)."""
    errors = exc.errors(include_url=False)
    parts = []
    for err in errors[:limit]:
        found = repr(err.get("input"))
        found = found if len(found) <= 60 else found[:57] + "..."
        where = json_path(err["loc"])
        parts.append(
            f"{where}: {err['msg']}" + ("" if err["type"] == "missing" else f" (found {found})")
        )
    if len(errors) > limit:
        parts.append(f"and {len(errors) - limit} more")
    return "; ".join(parts)


def context_problems(
    ctx: ChatContext, *, messages: bool = True
) -> list[tuple[tuple[str | int, ...], str]]:
    """What makes a well-typed context unusable, as (key path, problem): an unknown
    state, an active branch that does not exist, a branch stored under another
    name, or a branch naming a message, a parent message or a source branch that
    the context does not hold. Empty when the context is sound. Without
    ``messages`` (a context read without its message pool: an outline), what
    the branches say of messages is not checked."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    if ctx.current_state not in _STATES:
        out.append((("current_state",), f"unknown state {ctx.current_state!r}"))
    if ctx.active_branch_name not in ctx.branches:
        out.append(
            (("active_branch_name",), f"no branch named {ctx.active_branch_name!r} is stored")
        )
    pool = ctx.message_pool
    for name, branch in ctx.branches.items():
        if branch.name != name:
            out.append((("branches", name, "name"), f"the branch is stored as {name!r}"))
        source = branch.forked_from
        if source is not None and source not in ctx.branches:
            out.append((("branches", name, "forked_from"), f"no branch {source!r} is stored"))
        if not messages:
            continue
        for i, mid in enumerate(branch.message_ids):
            if mid not in pool:
                out.append((("branches", name, "message_ids", i), f"no message {mid!r} is stored"))
        parent = branch.parent_message_id
        if parent is not None and parent not in pool:
            out.append(
                (("branches", name, "parent_message_id"), f"no message {parent!r} is stored")
            )
    return out


def summary_of_config(config: object) -> tuple[str | None, str | None, bool]:
    """The title, the model id and the ``archived`` flag in a stored config
    column, for a context's summary (``None`` and ``False`` for what it lacks
    or when the column cannot be read: ``load`` says why)."""
    if not isinstance(config, str):
        return None, None, False
    try:
        found = json.loads(config)
    except ValueError:
        return None, None, False
    if not isinstance(found, dict):
        return None, None, False
    title, model = found.get("title"), found.get("model_id")
    return (
        title if isinstance(title, str) else None,
        model if isinstance(model, str) else None,
        found.get("archived") is True,
    )


def json_object_column(text: str, where: str) -> dict[str, Any]:
    """A stored column that holds a JSON object (a context's config or
    progress, a branch's body); :class:`StoreError` naming ``where`` if not."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StoreError(f"{where}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise StoreError(f"{where}: $: expected a JSON object, found {type(data).__name__}")
    return data


def step_detail_column(row: str, detail: object) -> dict[str, Any] | None:
    """A stored step's ``detail`` column: NULL (a transition), or a JSON object
    (a change record); :class:`StoreError` naming the row if it is neither."""
    if detail is None:
        return None
    if not isinstance(detail, str):
        raise StoreError(f"{row}, column detail: not text but {type(detail).__name__}")
    try:
        value = json.loads(detail)
    except ValueError:
        raise StoreError(f"{row}, column detail: not JSON") from None
    if not isinstance(value, dict):
        raise StoreError(f"{row}, column detail: not a JSON object")
    return value
