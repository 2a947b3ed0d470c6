"""What the two SQL stores (SQLite, PostgreSQL) share: their statements, the
rows a commit writes, the validation of the rows they read, and why a commit
was refused.

Both stores have the same tables and write the same rows (docs/storage.md,
"The backends"). The statements here are written with SQLite's ``?``
placeholders; :func:`pg` spells one for psycopg (``%s``). What differs stays
in each store's module: how a statement reaches the database (SQLite's
writer thread and group commit, PostgreSQL's pool and its functions), and
what each database checks for itself (PostgreSQL's typed columns; SQLite,
which lets any column hold anything, has every column checked with
:func:`column`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from pydantic import ValidationError

from .. import records
from ..errors import ContextNotFound, StoreError, VersionConflict
from ..model import (
    SCHEMA_VERSION,
    Branch,
    ChatConfig,
    ChatContext,
    MessageNode,
    TokenUsage,
    TurnProgress,
)
from ..records import from_json, to_json
from ._base import Commit, StepLog
from ._schema import (
    check_version,
    context_problems,
    json_object_column,
    json_path,
    message_from_record,
    step_detail_column,
    step_problem,
    upcast_branch,
    upcast_context,
    validation_problem,
)

__all__ = [
    "BRANCH_LENGTH",
    "DELETE_POSITIONS",
    "HEAD_COLUMNS",
    "INSERT_CONTEXT",
    "INSERT_MESSAGE",
    "INSERT_POSITIONS",
    "INSERT_STEPS",
    "NEXT_POSITION",
    "PAGE",
    "RELEASE",
    "RENEW",
    "REPLACE_MESSAGE",
    "UPSERT_BRANCH",
    "UPSERT_MESSAGE",
    "CommitRows",
    "Places",
    "branch_of",
    "check_outline",
    "column",
    "commit_rows",
    "context_of",
    "context_row",
    "message_of",
    "page_of",
    "pg",
    "positions",
    "refused_update",
    "step_of",
    "ts",
]

V = SCHEMA_VERSION

HEAD_COLUMNS = (
    "seq, schema_version, id, parent_id, config, active_branch, state, created_at, "
    "updated_at, version, event_seq, progress"
)
"""A ``contexts`` row, in the order :func:`context_of` reads it."""

INSERT_CONTEXT = (
    "INSERT INTO contexts (id, schema_version, version, state, parent_id, "
    "active_branch, event_seq, created_at, updated_at, config, progress) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
"""A new context's row (:func:`context_row`)."""
UPSERT_BRANCH = (
    "INSERT INTO branches (ctx, name, schema_version, body) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (ctx, name) DO UPDATE SET schema_version = excluded.schema_version, "
    "body = excluded.body"
)
DELETE_POSITIONS = "DELETE FROM branch_messages WHERE ctx = ? AND branch = ?"
INSERT_POSITIONS = (
    "INSERT INTO branch_messages (ctx, branch, pos, message_id, schema_version) "
    "VALUES (?, ?, ?, ?, ?)"
)
INSERT_MESSAGE = "INSERT INTO messages (ctx, id, schema_version, body) VALUES (?, ?, ?, ?)"
UPSERT_MESSAGE = (
    f"{INSERT_MESSAGE} ON CONFLICT (ctx, id) DO UPDATE SET "
    "schema_version = excluded.schema_version, body = excluded.body"
)
"""An appended message (a message appended again replaces its body)."""
REPLACE_MESSAGE = "UPDATE messages SET schema_version = ?, body = ? WHERE ctx = ? AND id = ?"
NEXT_POSITION = (
    "SELECT EXISTS (SELECT 1 FROM branches WHERE ctx = ? AND name = ?), "
    "(SELECT MAX(pos) FROM branch_messages WHERE ctx = ? AND branch = ?)"
)
"""Whether a branch exists, and its last position (NULL when it has none)."""
BRANCH_LENGTH = "(SELECT MAX(pos) FROM branch_messages WHERE ctx = b.ctx AND branch = b.name)"
"""The last position of the branch row ``b`` (NULL when it has none): a
branch's positions are 0 to its length - 1, as :data:`NEXT_POSITION` takes
them to be; one step down the primary key, whatever the length."""
PAGE = (
    "SELECT p.message_id, m.id, m.schema_version, m.body FROM branch_messages AS p "
    "LEFT JOIN messages AS m ON m.ctx = p.ctx AND m.id = p.message_id "
    "WHERE p.ctx = ? AND p.branch = ? AND p.pos >= ? ORDER BY p.pos LIMIT ?"
)
"""A page of a branch: its messages from an index (a position: see
:data:`BRANCH_LENGTH`) on, at most a number; the page's rows only, found
down the primary key (a position whose message is not stored has a NULL
``m.id``)."""
INSERT_STEPS = (
    "INSERT INTO steps (ctx, schema_version, version, from_state, trigger, "
    "to_state, at, detail, lease_token, lease_owner) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
PUT_LEASE = (
    "INSERT INTO leases (context_id, owner, token, expires_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (context_id) DO UPDATE SET owner = excluded.owner, "
    "token = excluded.token, expires_at = excluded.expires_at"
)
"""A context's lease, stored whole (made, or replacing the one before)."""
RELEASE = "UPDATE leases SET owner = NULL WHERE context_id = ? AND token = ?"
"""A lease given up under its token (the token stays)."""
RENEW = "UPDATE leases SET expires_at = ? WHERE context_id = ? AND token = ? AND owner IS NOT NULL"
_UPCAST_HEAD = (
    "UPDATE contexts SET schema_version = ?, parent_id = ?, active_branch = ?, "
    "state = ?, created_at = ?, updated_at = ?, event_seq = ?, config = ?, progress = ? "
    "WHERE seq = ?"
)

COLUMN_OF = {"active_branch_name": "active_branch", "current_state": "state"}
"""The column a field of the context is stored in, where its name differs."""


def pg(statement: str) -> str:
    """A statement of this module spelled for psycopg (``%s`` placeholders)."""
    return statement.replace("?", "%s")


def ts(value: datetime) -> str:
    return value.isoformat()


def column(row: str, name: str, value: object, kind: type | tuple[type, ...]) -> None:
    """Refuse a column holding NULL or a value of another type (SQLite lets any
    column hold anything) with a StoreError naming the row and the column."""
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        names = (kind,) if isinstance(kind, type) else kind
        want = " or ".join("NULL" if k is type(None) else k.__name__ for k in names)
        raise StoreError(f"{row}, column {name}: expected {want}, found {value!r}")


class Places:
    """Where a row or a field is, for an error: ``name`` is the file or the
    database (its URL without the password)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def where(self, context_id: str, what: str = "") -> str:
        return f"{self.name}: context {context_id!r}{what}"

    def row(self, context_id: str, table: str, key: str = "") -> str:
        """The file or database, the table, the row."""
        key = f", {key}" if key else ""
        return f"{self.name}: table {table}, row (context {context_id!r}{key})"

    def place(self, context_id: str, loc: tuple[str | int, ...]) -> str:
        """Where a field of the context (a key path) is stored."""
        if loc[0] in COLUMN_OF:
            return f"{self.row(context_id, 'contexts')}, column {COLUMN_OF[str(loc[0])]}"
        if loc[0] == "branches" and len(loc) > 2 and loc[2] == "message_ids":
            row = self.row(context_id, "branch_messages", f"branch {loc[1]!r}")
            return f"{row}, column message_id, {json_path(loc)}"
        if loc[0] == "branches" and len(loc) > 2:
            row = self.row(context_id, "branches", f"name {loc[1]!r}")
            return f"{row}, column body, {json_path(loc[2:])}"
        return f"{self.row(context_id, 'contexts')}, {json_path(loc)}"


# ---------------------------------------------------------------------- reading


def context_of(places: Places, head: Sequence[Any], *, check_columns: bool) -> ChatContext:
    """The context (without messages and branches) of a ``contexts`` row
    (:data:`HEAD_COLUMNS`), validated strictly; an older schema version is
    upcast. ``check_columns``: every column's type is checked first (SQLite);
    otherwise the database typed them, and the schema version is checked
    first."""
    (_, version, cid, parent_id, config, active, state, created, updated, ver, seq, prog) = head
    row = places.row(str(cid), "contexts")
    if check_columns:
        for name, value, kind in (
            ("id", cid, str),
            ("schema_version", version, int),
            ("parent_id", parent_id, (str, type(None))),
            ("config", config, str),
            ("active_branch", active, str),
            ("state", state, str),
            ("created_at", created, str),
            ("updated_at", updated, str),
            ("version", ver, int),
            ("event_seq", seq, int),
            ("progress", prog, str),
        ):
            column(row, name, value, kind)
    else:
        check_version(version, where=places.where(cid))
    data: dict[str, Any] = {
        "schema_version": version,
        "id": cid,
        "parent_id": parent_id,
        "config": json_object_column(config, f"{row}, column config"),
        "active_branch_name": active,
        "current_state": state,
        "created_at": created,
        "updated_at": updated,
        "version": ver,
        "event_seq": seq,
        "progress": json_object_column(prog, f"{row}, column progress"),
    }
    if version != V:
        data = upcast_context(data, version, where=places.where(cid))
        data["schema_version"] = V
    for name, model in (("config", ChatConfig), ("progress", TurnProgress)):
        try:  # strictly: a number stored as text is damage, not a number
            data[name] = from_json(model, json.dumps(data[name]), strict=True)
        except ValidationError as exc:
            raise StoreError(f"{row}, column {name}: {validation_problem(exc)}") from None
    try:
        return records.from_python(ChatContext, data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        field = str(err["loc"][0]) if err["loc"] else ""
        name = COLUMN_OF.get(field, field)
        raise StoreError(f"{row}, column {name}: {validation_problem(exc)}") from None


def branch_of(
    places: Places, context_id: str, name: str, version: int, body: str, ids: list[str]
) -> Branch:
    """A ``branches`` row with its message ids (from ``branch_messages``),
    validated; an older schema version is upcast."""
    row = places.row(context_id, "branches", f"name {name!r}")
    data = json_object_column(body, f"{row}, column body")
    if version != V:
        data = upcast_branch(data, version, where=places.where(context_id, f", branch {name!r}"))
    data["message_ids"] = ids
    try:
        return records.from_python(Branch, data)
    except ValidationError as exc:
        raise StoreError(
            f"{row}, column body: not a valid Branch record: {validation_problem(exc)}"
        ) from exc


def message_of(places: Places, context_id: str, mid: str, version: int, body: str) -> MessageNode:
    """A ``messages`` row, validated strictly (an older schema version upcast);
    its body must be the message the row's id names."""
    row = places.row(context_id, "messages", f"id {mid!r}")
    if version == V:
        try:
            node = from_json(MessageNode, body, strict=True)
        except ValidationError as exc:
            raise StoreError(f"{row}, column body: {validation_problem(exc)}") from None
    else:
        node = message_from_record(
            body, version, where=places.where(context_id, f", message {mid!r}")
        )
    if node.id != mid:
        raise StoreError(f"{row}, column body: $.id: the message is {node.id!r}")
    return node


def page_of(
    places: Places,
    context_id: str,
    name: str,
    offset: int,
    rows: Iterable[Sequence[Any]],
    message: Callable[[str, Any, Any, Any], MessageNode],
) -> list[MessageNode]:
    """The messages of the rows :data:`PAGE` read from branch ``name`` at
    ``offset`` (position's message id, message row's id, schema version,
    body), each made by ``message(context_id, id, version, body)``; a
    position whose message is not stored is a StoreError naming it, as
    ``load`` names it."""
    out = []
    for i, (mid, found, version, body) in enumerate(rows, offset):
        if found is None:
            loc = ("branches", name, "message_ids", i)
            raise StoreError(f"{places.place(context_id, loc)}: no message {mid!r} is stored")
        out.append(message(context_id, mid, version, body))
    return out


def check_outline(places: Places, ctx: ChatContext) -> None:
    """Refuse what ``load`` would refuse in a context read without its messages
    (its row and its branches: see ``context_problems``) with the StoreError
    ``load`` raises, naming the place."""
    problems = context_problems(ctx, messages=False)
    if problems:
        loc, problem = problems[0]
        raise StoreError(f"{places.place(ctx.id, loc)}: {problem}")


def step_of(
    row: str,
    version: int,
    a: str,
    t: str,
    b: str,
    at: str,
    detail: object,
    token: int | None,
    owner: str | None,
) -> StepLog:
    """A ``steps`` row (``row`` says where it is, for an error)."""
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        raise StoreError(f"{row}, column at: not a timestamp: {at!r}") from None
    problem = step_problem(a, b)
    if problem is not None:
        raise StoreError(f"{row}, column {problem}")
    return StepLog(version, a, t, b, when, step_detail_column(row, detail), token, owner)


# ---------------------------------------------------------------------- writing


def context_row(context: ChatContext) -> tuple[Any, ...]:
    """The values of :data:`INSERT_CONTEXT` for a new context."""
    return (
        context.id,
        V,
        context.version,
        context.current_state,
        context.parent_id,
        context.active_branch_name,
        context.event_seq,
        ts(context.created_at),
        ts(context.updated_at),
        to_json(context.config).decode(),
        to_json(context.progress).decode(),
    )


class CommitRows(NamedTuple):
    """A commit, serialized (:func:`commit_rows`)."""

    update: str
    params: list[Any]
    replaced: list[tuple[str, str]]
    """(body, message id)"""
    appended: list[tuple[str, str, str]]
    """(branch, message id, body)"""
    steps: list[tuple[int, str, str, str, str, str | None, int | None, str | None]]
    """(version, from, trigger, to, at, detail as JSON, lease token, lease owner)"""


_DETAIL = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(detail, ensure_ascii=False)``, its encoder made once (``dumps``
with an option makes a new one per call)."""

_UPDATES: dict[tuple[str, bool, bool, str, int], str] = {}
"""The ``UPDATE`` texts of :func:`commit_rows`, made once per shape."""

_POSITION_OF = (
    ", EXISTS (SELECT 1 FROM branches WHERE ctx = contexts.seq AND name = {m}), "
    "(SELECT MAX(pos) FROM branch_messages WHERE ctx = contexts.seq AND branch = {m})"
)


def _update(mark: str, branch: bool, config: bool, also: str, positions: int) -> str:
    key = (mark, branch, config, also, positions)
    found = _UPDATES.get(key)
    if found is None:
        sets = (
            f"version = {mark}, state = {mark}, updated_at = {mark}, event_seq = {mark}, "
            f"progress = {mark}"
        )
        if branch:
            sets += f", active_branch = {mark}"
        if config:
            sets += f", config = {mark}"
        where = f"WHERE id = {mark} AND version = {mark} AND schema_version = {mark}{also}"
        more = _POSITION_OF.format(m=mark) * positions
        found = _UPDATES[key] = f"UPDATE contexts SET {sets} {where} RETURNING seq{more}"
    return found


def _dumper(tp: type) -> Any:
    """The JSON serialiser of a record type: ``records.to_json`` without its
    wrappers (the same bytes)."""
    return records.adapter(tp).serializer.to_json


_PROGRESS_JSON = _dumper(TurnProgress)
_NODE_JSON = _dumper(MessageNode)

# The other adapters a SQL store's load and commit use (and the usage of an
# answer) are built with this module too, as the records' adapters were built
# by ``import turnfsm`` before: on first use their cost would fall on a fresh
# process's first load (docs/benchmarks.md, W5). A process on no durable store
# builds none of them.
for _tp in (ChatContext, ChatConfig, Branch, TokenUsage):
    records.adapter(_tp)
del _tp


def commit_rows(
    commit: Commit,
    *,
    mark: str = "?",
    also: tuple[str, list[Any]] | None = None,
    positions: bool = False,
) -> CommitRows:
    """What a commit writes, serialized: the ``UPDATE`` of the context row
    (its version check; ``also``: more of its ``WHERE``, and their values),
    and the rows of the replaced and appended messages and of the steps,
    without the context's ``seq`` (known once the ``UPDATE`` has found the
    row). ``mark`` is the database's placeholder. ``positions``: the
    ``UPDATE`` also returns, for each branch appended to (in the order first
    appended), whether it exists and its last position (NULL when it has
    none), as :data:`NEXT_POSITION` reads them."""
    params: list[Any] = [
        commit.version,
        commit.state,
        commit.updated_at.isoformat(),
        commit.event_seq,
        _PROGRESS_JSON(commit.progress).decode(),
    ]
    if commit.active_branch is not None:
        params.append(commit.active_branch)
    if commit.config is not None:
        params.append(to_json(commit.config).decode())
    params += (commit.context_id, commit.expected_version, V)
    if also is not None:
        params += also[1]
    names: Any = ()
    if positions and commit.appended:
        if len(commit.appended) == 1:
            names = (commit.appended[0][0],)
        else:
            names = dict.fromkeys(name for name, _ in commit.appended)
        for name in names:
            params += (name, name)
    update = _update(
        mark,
        commit.active_branch is not None,
        commit.config is not None,
        "" if also is None else also[0],
        len(names),
    )
    token = commit.lease_token
    owner = commit.lease_owner if token is not None else None
    return CommitRows(
        update,
        params,
        [(to_json(n).decode(), n.id) for n in commit.replaced],
        [(name, n.id, _NODE_JSON(n).decode()) for name, n in commit.appended],
        [
            (
                s.version,
                s.from_state,
                s.trigger,
                s.to_state,
                s.at.isoformat(),
                None if s.detail is None else _DETAIL(s.detail),
                token,
                owner,
            )
            for s in commit.steps
        ],
    )


def positions(
    commit: Commit, seq: int, rows: CommitRows, last: dict[str, tuple[object, int | None]]
) -> list[tuple[int, str, int, str, int]]:
    """The ``branch_messages`` rows of a commit's appended messages, each at the
    position after its branch's last (``last``: per branch appended to, what
    :data:`NEXT_POSITION` read: whether it exists, its last position); a
    StoreError for a branch that does not exist."""
    next_pos: dict[str, int] = {}
    out = []
    for name, mid, _body in rows.appended:
        pos = next_pos.get(name)
        if pos is None:
            known, before = last[name]
            if not known:
                raise StoreError(
                    f"commit appends to unknown branch {name!r} of context {commit.context_id!r}"
                )
            pos = 0 if before is None else before + 1
        next_pos[name] = pos + 1
        out.append((seq, name, pos, mid, V))
    return out


def refused_update(
    places: Places, commit: Commit, head: Sequence[Any] | None, *, check_columns: bool
) -> tuple[str, tuple[Any, ...]]:
    """A commit's version check missed on the context row ``head`` (as read
    again, :data:`HEAD_COLUMNS`): raise why (no such context, another
    version, a newer schema), or, when the row is of an older schema version,
    return the statement (with ``?`` placeholders) and its values that bring
    it up to date, after which the check is made again."""
    cid = commit.context_id
    if head is None:
        raise ContextNotFound(cid)
    schema_version, version = head[1], head[9]
    check_version(schema_version, where=places.where(cid))
    if version != commit.expected_version:
        raise VersionConflict(cid, commit.expected_version, version)
    ctx = context_of(places, head, check_columns=check_columns)  # upcast
    return _UPCAST_HEAD, (
        V,
        ctx.parent_id,
        ctx.active_branch_name,
        ctx.current_state,
        ts(ctx.created_at),
        ts(ctx.updated_at),
        ctx.event_seq,
        to_json(ctx.config).decode(),
        to_json(ctx.progress).decode(),
        head[0],
    )
