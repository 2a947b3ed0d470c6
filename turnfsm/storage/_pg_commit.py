"""How the PostgreSQL store writes a commit: the one-statement form (the JSON
document ``turnfsm_commit`` takes) and, when that misses or does not apply,
the same commit as separate statements in one transaction, which say why a
commit is refused with the store's typed errors (or bring an older row up to
date and apply it). Locks are taken in one order everywhere: a lease row
before its context row."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..errors import LeaseLost, StoreError
from ..model import SCHEMA_VERSION, Branch
from ..records import to_json
from ..states import RESTING
from ._base import Commit
from ._pg_schema import WORK_CHANNEL
from ._sql import (
    DELETE_POSITIONS,
    HEAD_COLUMNS,
    INSERT_POSITIONS,
    INSERT_STEPS,
    NEXT_POSITION,
    RELEASE,
    REPLACE_MESSAGE,
    UPSERT_BRANCH,
    UPSERT_MESSAGE,
    CommitRows,
    Places,
    commit_rows,
    pg,
    positions,
    refused_update,
    ts,
)

__all__ = [
    "COMMIT",
    "commit_document",
    "commit_statements",
    "current_token",
    "lease_token",
    "put_branches",
    "refused_token",
]

_V = SCHEMA_VERSION
_RESTING = frozenset(s.value for s in RESTING)

_UPSERT_BRANCH = pg(UPSERT_BRANCH)
_DELETE_POSITIONS = pg(DELETE_POSITIONS)
_INSERT_POSITIONS = pg(INSERT_POSITIONS)
_UPSERT_MESSAGE = pg(UPSERT_MESSAGE)
_REPLACE_MESSAGE = pg(REPLACE_MESSAGE)
_NEXT_POSITION = pg(NEXT_POSITION)
_INSERT_STEPS = pg(INSERT_STEPS)
_RELEASE = pg(RELEASE)

_TAKE = (
    "INSERT INTO leases AS l (context_id, owner, token, expires_at) "
    "VALUES (%s, %s, %s, %s) ON CONFLICT (context_id) DO UPDATE SET "
    "owner = excluded.owner, token = excluded.token, "
    "expires_at = excluded.expires_at "
    "WHERE l.token = %s AND (l.owner IS NULL OR l.owner = %s) RETURNING token"
)
"""A commit that takes the lease: taken only from the token just before,
released or ours."""

COMMIT = "SELECT turnfsm_commit(%s::jsonb)"
"""A commit as one statement (the function of migration 4), its fields as one
JSON document (one parameter: cheaper to send than many arrays)."""


def commit_document(commit: Commit) -> str | None:
    """The JSON document ``turnfsm_commit`` takes for ``commit``; None for one it
    does not take (a message appended twice, which the statements store as an
    insert then an update). Stored texts (bodies, details) are JSON strings in
    it, so that the function stores them as the statements would."""
    appended = commit.appended
    if len({node.id for _, node in appended}) != len(appended):
        return None
    take = commit.take_lease if commit.lease_token is not None else None
    token = commit.lease_token
    # branches stored whole: a name given twice keeps its first place and its
    # last body and positions, as one write after the other would
    branches: dict[str, Branch] = {}
    for b in commit.branches:
        branches[b.name] = b
    document = {
        "id": commit.context_id,
        "ev": commit.expected_version,
        "v": commit.version,
        "sv": _V,
        "st": commit.state,
        "at": ts(commit.updated_at),
        "es": commit.event_seq,
        "pg": to_json(commit.progress).decode(),
        "ab": commit.active_branch,
        "cf": None if commit.config is None else to_json(commit.config).decode(),
        "tk": token,
        "ow": None if token is None else commit.lease_owner,
        "tt": None if take is None else take.token,
        "to": None if take is None else take.owner,
        "te": None if take is None else take.expires_at,
        "rl": commit.release_lease,
        # handed off: away from rest with its lease released, the context is
        # work for claim_expired; ring the workers' doorbell (delivered when
        # the statement commits, and not at all if it fails)
        "nt": commit.release_lease and commit.state not in _RESTING,
        "br": [[b.name, to_json(b, exclude={"message_ids"}).decode()] for b in branches.values()],
        "bm": [
            [b.name, pos, mid] for b in branches.values() for pos, mid in enumerate(b.message_ids)
        ],
        "rp": [[n.id, to_json(n).decode()] for n in commit.replaced],
        "ap": [[name, n.id, to_json(n).decode()] for name, n in appended],
        "s": [
            [
                x.version,
                x.from_state,
                x.trigger,
                x.to_state,
                ts(x.at),
                None if x.detail is None else json.dumps(x.detail, ensure_ascii=False),
            ]
            for x in commit.steps
        ],
    }
    return json.dumps(document, ensure_ascii=False, allow_nan=False)


def refused_token(commit: Commit) -> int:
    """The token a refused commit's LeaseLost names (as :func:`commit_statements` does)."""
    take = commit.take_lease
    if take is not None and commit.lease_token is not None:
        return take.token
    assert commit.lease_token is not None
    return commit.lease_token


def current_token(exc: Any) -> int | None:
    """The lease's current token that ``turnfsm_commit`` reports (DETAIL)."""
    detail = exc.diag.message_detail or ""
    try:
        found = int(detail)
    except ValueError:
        return None
    return found if found > 0 else None


async def put_branches(
    conn: Any, seq: int, branches: Iterable[Branch], replace: bool = False
) -> None:
    """Store ``branches`` of the context ``seq`` whole (with ``replace``, their
    old positions go first)."""
    async with conn.cursor() as c:
        for b in branches:
            await c.execute(
                _UPSERT_BRANCH,
                (seq, b.name, _V, to_json(b, exclude={"message_ids"}).decode()),
            )
            if replace:
                await c.execute(_DELETE_POSITIONS, (seq, b.name))
            if b.message_ids:
                await c.executemany(
                    _INSERT_POSITIONS,
                    [(seq, b.name, i, mid, _V) for i, mid in enumerate(b.message_ids)],
                )


async def lease_token(conn: Any, context_id: str) -> int | None:
    """The lease's current token (None: none, or released)."""
    cur = await conn.execute("SELECT token FROM leases WHERE context_id = %s", (context_id,))
    row = await cur.fetchone()
    return row[0] if row is not None and row[0] > 0 else None


async def commit_statements(conn: Any, places: Places, commit: Commit) -> None:
    """``commit`` as separate statements, in the caller's transaction: the
    lease first (taken, or its fence checked), then the context row's version
    check, then the rows the commit adds, then the lease's release and the
    workers' doorbell."""
    await _lease_first(conn, commit)
    rows = commit_rows(commit, mark="%s")
    seq = await _update_context(conn, places, commit, rows)
    await _write_rows(conn, seq, commit, rows)
    await _after(conn, commit)


async def _lease_first(conn: Any, commit: Commit) -> None:
    cid = commit.context_id
    take = commit.take_lease if commit.lease_token is not None else None
    if take is not None:
        owner = None if commit.release_lease else take.owner
        params = (cid, owner, take.token, take.expires_at, take.token - 1, take.owner)
        cur = await conn.execute(_TAKE, params)
        if await cur.fetchone() is None:
            raise LeaseLost(cid, take.token, await lease_token(conn, cid))
    elif commit.lease_token is not None:
        await _check_fence(conn, cid, commit.lease_token)


async def _check_fence(conn: Any, context_id: str, token: int) -> None:
    """The fence of a commit under a lease: lock the lease's row and refuse
    with LeaseLost unless ``token`` is still its token (another owner that
    acquired or claimed it since has a larger one)."""
    cur = await conn.execute(
        "SELECT token FROM leases WHERE context_id = %s FOR UPDATE", (context_id,)
    )
    found = await cur.fetchone()
    current = found[0] if found is not None and found[0] > 0 else None
    if current != token:
        raise LeaseLost(context_id, token, current)


async def _update_context(conn: Any, places: Places, commit: Commit, rows: CommitRows) -> int:
    """The version check and the context row's small fields; the row's seq."""
    cur = await conn.execute(rows.update, rows.params)
    row = await cur.fetchone()
    if row is None:
        await _refused(conn, places, commit)  # raises, or brings an old row up to date
        cur = await conn.execute(rows.update, rows.params)
        row = await cur.fetchone()
        if row is None:  # pragma: no cover - _refused explains every miss
            raise StoreError(f"context {commit.context_id!r}: the commit was not applied")
    seq: int = row[0]
    return seq


async def _refused(conn: Any, places: Places, commit: Commit) -> None:
    """The version check missed: say why, or (an older schema version) bring
    the context row up to date so that the check can be made again
    (:func:`~turnfsm.storage._sql.refused_update`)."""
    cur = await conn.execute(
        f"SELECT {HEAD_COLUMNS} FROM contexts WHERE id = %s FOR UPDATE", (commit.context_id,)
    )
    head = await cur.fetchone()
    update, params = refused_update(places, commit, head, check_columns=False)
    await conn.execute(pg(update), params)


async def _write_rows(conn: Any, seq: int, commit: Commit, rows: CommitRows) -> None:
    """The branches, replaced messages, appended messages and steps."""
    if commit.branches:
        await put_branches(conn, seq, commit.branches, replace=True)
    for body, mid in rows.replaced:
        cur = await conn.execute(_REPLACE_MESSAGE, (_V, body, seq, mid))
        if cur.rowcount != 1:
            raise StoreError(
                f"commit replaces message {mid!r} of context {commit.context_id!r}, "
                "which is not stored"
            )
    if rows.appended:
        last = {}
        for name in dict.fromkeys(name for name, _, _ in rows.appended):
            cur = await conn.execute(_NEXT_POSITION, (seq, name, seq, name))
            last[name] = await cur.fetchone()
        placed = positions(commit, seq, rows, last)
        async with conn.cursor() as c:
            await c.executemany(
                _UPSERT_MESSAGE, [(seq, mid, _V, body) for _name, mid, body in rows.appended]
            )
            await c.executemany(_INSERT_POSITIONS, placed)
    if rows.steps:
        async with conn.cursor() as c:
            await c.executemany(_INSERT_STEPS, [(seq, _V, *step) for step in rows.steps])


async def _after(conn: Any, commit: Commit) -> None:
    take = commit.take_lease if commit.lease_token is not None else None
    if take is None and commit.release_lease and commit.lease_token is not None:
        await conn.execute(_RELEASE, (commit.context_id, commit.lease_token))
    if commit.release_lease and commit.state not in _RESTING:
        # handed off: away from rest with its lease released, the context is
        # work for claim_expired; ring the workers' doorbell (delivered when
        # this transaction commits, and not at all if it rolls back)
        await conn.execute(f"NOTIFY {WORK_CHANNEL}")
