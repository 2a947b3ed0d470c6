"""Tools from Model Context Protocol servers (extra ``mcp``; docs/mcp.md).

An :class:`MCPServer` is a :class:`~turnfsm.tools.Toolset`: give it to the
engine and its tools are offered like the engine's own, under the same
approval and crash rules::

    from turnfsm.tools.mcp import MCPServer

    files = MCPServer.stdio("npx -y @modelcontextprotocol/server-filesystem /srv/docs")
    search = MCPServer.http("https://mcp.example.com/mcp", headers={"Authorization": "Bearer ..."})
    async with Engine(llm=llm, toolsets=[files, search]) as engine:
        ...

The server starts (stdio: its process; Streamable HTTP: its session) when the
engine is entered and stops when it closes, cancelled or not. The rules, each
documented in docs/mcp.md:

- **Names.** A tool keeps the server's name unless the server has a
  ``prefix``: then it is ``prefix__name``. Characters outside
  ``a-z A-Z 0-9 _ -`` become ``_``; a name longer than 64 characters is cut to
  55 and given ``_`` and 8 hex digits of its SHA-1. Two tools of one name
  (across servers, or with the engine's own) refuse to start the engine; one
  that appears later is not offered (a warning says so).
- **Approval.** Every tool of a server gets the server's ``approval``
  (``"required"`` unless the application says otherwise). The server's
  annotations are hints from an untrusted party and change nothing on their
  own: ``read_only_approval`` (an application's opt-in) is the approval of
  the tools whose server says ``readOnlyHint: true`` and does not say
  ``destructiveHint: true``; ``trust_idempotent_hint`` (an opt-in) makes a
  tool idempotent when the server says ``idempotentHint: true`` or
  ``readOnlyHint: true``. ``destructiveHint`` only ever withholds the
  read-only opt-in.
- **Results.** ``structuredContent`` is the result when the content beside it
  is text (its serialisation); one text block alone is the result as text;
  anything else is ``{"content": [...]}`` (the blocks as the server sent
  them: text, images, audio, embedded resources, resource links), with
  ``"structuredContent"`` beside it when there is some. ``isError`` gives a
  failed result ``{"error": text}`` the model sees (``"content"`` added when
  there is more than text).
- **Faults.** A server that dies, does not answer within ``timeout``, or
  sends what is not MCP gives the call a failed result and its connection is
  closed; the next call starts the server again (stdio) or reconnects
  (HTTP). Nothing of it reaches the engine as an exception.
- **Changes.** ``notifications/tools/list_changed`` makes the server list its
  tools again; a change announced during a call is listed before the call's
  result is returned, so the next request offers it.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import anyio
from anyio.abc import TaskGroup, TaskStatus

from turnfsm.errors import ToolDefinitionError, ToolsetError

from ._mcp_results import describe, outcome_of
from ._mcp_transport import (
    Client,
    Connection,
    MCPError,
    StdioServerParameters,
    client_info,
    create_mcp_http_client,
    maybe,
    mt,
    streamable_http_client,
    transport_of,
)
from ._schema import InvalidArguments, binder_from_spec
from ._spec import Approval, ApprovalPolicy, Tool, ToolOutcome, _normalise_policy

__all__ = ["MCPServer", "MCPTool", "tool_name"]

_log = logging.getLogger("turnfsm.tools.mcp")

_INVALID = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_NAME = 64
_MAX_PAGES = 100
_CLOSE_WAIT = 10.0
"""Seconds the engine waits for a server to stop (stdio: the SDK closes its
stdin, then terminates and kills it within about 6 seconds)."""


def tool_name(name: str, prefix: str | None = None) -> str:
    """The name a server's tool ``name`` is offered by (the rule in the module docstring)."""
    full = f"{prefix}__{name}" if prefix else name
    clean = _INVALID.sub("_", full) or "_"
    if len(clean) > _MAX_NAME:
        digest = hashlib.sha1(full.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        clean = f"{clean[:55]}_{digest}"
    return clean


class MCPTool(Tool):
    """A tool of an MCP server. Its call goes to the server; its approval and
    idempotence were decided by the server's settings (see the module docstring).

    ``remote_name`` is the tool's name on the server, ``annotations`` the hints
    the server gave (``{"readOnlyHint": true, ...}``, as sent), ``server`` the
    :class:`MCPServer` it belongs to.
    """

    __slots__ = ()

    @property
    def remote(self) -> _Remote:
        fn = self.fn
        assert isinstance(fn, _Remote)
        return fn

    @property
    def server(self) -> MCPServer:
        return self.remote.server

    @property
    def remote_name(self) -> str:
        return self.remote.name

    @property
    def annotations(self) -> Mapping[str, Any]:
        return self.remote.annotations

    async def run(self, arguments: dict[str, Any]) -> ToolOutcome:
        """Check the arguments against the schema's basics, then call the server.
        Never raises but for cancellation."""
        if isinstance(arguments, dict):
            try:
                self._bind(arguments)
            except InvalidArguments:
                pass
            else:
                return await self.remote.server.call(self.remote.name, arguments)
        return await Tool.run(self, arguments)  # the usual failed outcome


@dataclass(frozen=True, slots=True, eq=False)
class _Remote:
    """The "function" of an :class:`MCPTool`: the server and the tool's name there."""

    server: MCPServer
    name: str
    annotations: Mapping[str, Any] = field(default_factory=dict)

    async def __call__(self, **arguments: Any) -> ToolOutcome:
        return await self.server.call(self.name, arguments)


class MCPServer:
    """One MCP server as a :class:`~turnfsm.tools.Toolset`.

    Make it with :meth:`stdio` (a command line) or :meth:`http` (a Streamable
    HTTP URL). ``restarts`` counts the connections made after the first one.
    """

    def __init__(
        self,
        target: StdioServerParameters | tuple[str, dict[str, str]],
        *,
        name: str | None = None,
        prefix: str | None = None,
        approval: ApprovalPolicy = Approval.REQUIRED,
        read_only_approval: ApprovalPolicy | None = None,
        idempotent: bool = False,
        trust_idempotent_hint: bool = False,
        timeout: float = 60.0,
        start_timeout: float = 60.0,
        stderr: IO[str] | None = None,
    ) -> None:
        """Internal: use :meth:`stdio` or :meth:`http`."""
        if prefix is not None and (not isinstance(prefix, str) or not _NAME.match(prefix)):
            raise ToolDefinitionError(
                f"MCP server prefix {prefix!r}: 1 to 40 characters from a-z, A-Z, 0-9, '_', '-'"
            )
        for what, value in (("timeout", timeout), ("start_timeout", start_timeout)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ToolDefinitionError(f"MCP server {what} must be > 0 seconds, not {value!r}")
        # checked now, as a tool's would be (a bad one is a ToolDefinitionError)
        approval = _normalise_policy(approval, "MCP server approval")
        if read_only_approval is not None:
            read_only_approval = _normalise_policy(
                read_only_approval, "MCP server read_only_approval"
            )
        self._target = target
        self._given_name = name
        self.prefix = prefix
        self.approval = approval
        self.read_only_approval = read_only_approval
        self.idempotent = bool(idempotent)
        self.trust_idempotent_hint = bool(trust_idempotent_hint)
        self.timeout = float(timeout)
        self.start_timeout = float(start_timeout)
        self._stderr = stderr
        self._reported: str | None = None
        self._tools: tuple[MCPTool, ...] = ()
        self._listeners: list[Callable[[], None]] = []
        self._group: TaskGroup | None = None
        self._conn: Connection | None = None
        self._lock: anyio.Lock | None = None
        self._listing: anyio.Event | None = None
        self._closed = False
        self.restarts = -1

    # ------------------------------------------------------------------ construction

    @classmethod
    def stdio(
        cls,
        command: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        name: str | None = None,
        prefix: str | None = None,
        approval: ApprovalPolicy = Approval.REQUIRED,
        read_only_approval: ApprovalPolicy | None = None,
        idempotent: bool = False,
        trust_idempotent_hint: bool = False,
        timeout: float = 60.0,
        start_timeout: float = 60.0,
        stderr: IO[str] | None = None,
    ) -> MCPServer:
        """A server run as a process, spoken to over its stdin and stdout.

        ``command`` is a command line (split as a POSIX shell would, no shell
        runs it) or a list of words. The process gets the SDK's safe subset of
        this process's environment (``HOME``, ``PATH``, ...) plus ``env``; its
        stderr goes to ``stderr`` (default: this process's, when that is a file,
        else nowhere).
        """
        words = shlex.split(command) if isinstance(command, str) else list(command)
        if not words or not all(isinstance(w, str) and w for w in words):
            raise ToolDefinitionError(f"MCP server command {command!r}: no program to run")
        target = StdioServerParameters(
            command=words[0], args=words[1:], env=dict(env) if env else None, cwd=cwd
        )
        return cls(
            target,
            name=name,
            prefix=prefix,
            approval=approval,
            read_only_approval=read_only_approval,
            idempotent=idempotent,
            trust_idempotent_hint=trust_idempotent_hint,
            timeout=timeout,
            start_timeout=start_timeout,
            stderr=stderr,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        prefix: str | None = None,
        approval: ApprovalPolicy = Approval.REQUIRED,
        read_only_approval: ApprovalPolicy | None = None,
        idempotent: bool = False,
        trust_idempotent_hint: bool = False,
        timeout: float = 60.0,
        start_timeout: float = 60.0,
    ) -> MCPServer:
        """A server at a Streamable HTTP endpoint; ``headers`` go with every
        request (``Authorization`` for a bearer token)."""
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ToolDefinitionError(f"MCP server URL {url!r}: expected http(s)://host/path")
        return cls(
            (url, dict(headers or {})),
            name=name,
            prefix=prefix,
            approval=approval,
            read_only_approval=read_only_approval,
            idempotent=idempotent,
            trust_idempotent_hint=trust_idempotent_hint,
            timeout=timeout,
            start_timeout=start_timeout,
        )

    # ------------------------------------------------------------------ Toolset

    @property
    def name(self) -> str:
        """The name given, else the prefix, else the name the server reported,
        else the program (stdio) or the host (HTTP)."""
        if self._given_name:
            return self._given_name
        if self.prefix:
            return self.prefix
        if self._reported:
            return self._reported
        target = self._target
        if isinstance(target, StdioServerParameters):
            return Path(target.command).name
        return urlsplit(target[0]).netloc

    def __repr__(self) -> str:
        return f"MCPServer({self.name!r}, tools={[t.name for t in self._tools]!r})"

    def tools(self) -> tuple[MCPTool, ...]:
        return self._tools

    def on_change(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    async def start(self) -> None:
        """Connect and list the tools; :class:`~turnfsm.errors.ToolsetError` when
        the server cannot be started or does not answer within ``start_timeout``."""
        if self._group is not None:
            return
        self._closed = False
        self._lock = anyio.Lock()
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        try:
            with anyio.fail_after(self.start_timeout):
                conn = await self._open()
                self._set_tools(await self._list(conn))
        except BaseException as exc:
            await self.aclose()
            if isinstance(exc, Exception):
                raise ToolsetError(
                    f"MCP server {self.name!r} could not be started: {describe(exc)}"
                ) from exc
            raise

    async def aclose(self) -> None:
        """Stop the server (stdio: its process is gone when this returns)."""
        self._closed = True
        self._tools = ()
        group, self._group = self._group, None
        conn, self._conn = self._conn, None
        if group is None:
            return
        if conn is not None:
            conn.stop.set()
            # shielded: a cancelled caller must not leave the server's process behind
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_WAIT):
                await conn.done.wait()
        group.cancel_scope.cancel()
        await group.__aexit__(None, None, None)  # entered in start(), by this task

    # ------------------------------------------------------------------ calls

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        """Call the server's tool ``name``: its result, or a failed outcome saying
        what went wrong. Never raises but for cancellation."""
        who = f"tool {name!r} of MCP server {self.name!r}"
        if self._closed or self._group is None:
            return ToolOutcome(False, {"error": f"{who}: the server is not running"})
        try:
            with anyio.fail_after(self.start_timeout):
                conn, client = await self._client()
        except Exception as exc:
            why = f"{who}: the server is not available: {describe(exc)}"
            return ToolOutcome(False, {"error": why})
        result: mt.CallToolResult | None = None
        try:
            with anyio.move_on_after(self.timeout):
                result = await client.call_tool(name, arguments)
        except MCPError as exc:
            if exc.code == mt.CONNECTION_CLOSED:
                why = conn.why or "the connection closed during the call (the server exited?)"
                self._drop(conn, why)
                return ToolOutcome(False, {"error": f"{who}: {why}; {self._again}"})
            return ToolOutcome.of(False, {"error": f"{who}: {exc.message}", "code": exc.code})
        except Exception as exc:  # the connection failed, or the answer had the wrong shape
            self._drop(conn, describe(exc))
            what = "the server's answer was not MCP" if isinstance(exc, ValueError) else "failed"
            return ToolOutcome(False, {"error": f"{who}: {what} ({describe(exc)}); {self._again}"})
        if result is None:
            self._drop(conn, f"no answer within {self.timeout:g}s")
            why = f"{who}: no answer within {self.timeout:g}s; {self._again}"
            return ToolOutcome(False, {"error": why})
        await self._listed()
        return outcome_of(result, who)

    @property
    def _again(self) -> str:
        how = "connected" if isinstance(self._target, tuple) else "started"
        return f"the server is {how} again for the next call"

    # ------------------------------------------------------------------ connections

    async def _client(self) -> tuple[Connection, Client]:
        """The live connection, opened again when the last one was dropped."""
        conn = self._conn
        if conn is not None and conn.alive:
            assert conn.client is not None
            return conn, conn.client
        assert self._lock is not None
        async with self._lock:
            conn = self._conn
            if conn is None or not conn.alive:
                if conn is not None:
                    await self._retire(conn)
                conn = await self._open()
                try:  # its list may have changed while it was down
                    self._set_tools(await self._list(conn))
                except Exception as exc:
                    _log.warning("MCP server %r: listing its tools failed: %s", self.name, exc)
            assert conn.client is not None
            return conn, conn.client

    async def _open(self) -> Connection:
        assert self._group is not None
        conn = Connection()
        try:
            await self._group.start(self._hold, conn)
        except Exception as exc:
            if conn.why is None:
                raise
            # what ended it (a line that is not MCP), not the SDK's "Connection closed"
            raise ConnectionError(conn.why) from exc
        self._conn = conn
        self.restarts += 1
        return conn

    async def _retire(self, conn: Connection) -> None:
        conn.stop.set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_WAIT):
            await conn.done.wait()

    def _drop(self, conn: Connection, why: str) -> None:
        if not conn.stop.is_set():
            if conn.client is not None:  # while it starts, the error raised says why
                _log.warning("MCP server %r: %s; closing the connection", self.name, why)
            conn.why = why
            conn.stop.set()

    async def _hold(self, conn: Connection, *, task_status: TaskStatus[None]) -> None:
        """Open the connection, report it, and keep it open until asked to stop.
        Runs in the server's task group: after it reported, nothing escapes it."""
        started = False
        handler = functools.partial(self._on_message, conn)
        try:
            target = self._target
            if isinstance(target, StdioServerParameters):
                transport: Any = target
                http = None
            else:
                url, headers = target
                http = create_mcp_http_client(headers=headers or None)
            async with maybe(http):
                if http is not None:
                    transport = streamable_http_client(url, http_client=http)
                async with Client(
                    transport_of(transport, self._stderr),
                    mode="legacy",
                    message_handler=handler,
                    cache=None,
                    client_info=client_info(),
                ) as client:
                    conn.client = client
                    info = client.server_info
                    if info is not None and info.name:
                        self._reported = info.name
                    started = True
                    task_status.started()
                    await conn.stop.wait()
        except Exception as exc:
            if not started:
                raise
            _log.warning("MCP server %r: the connection ended: %s", self.name, describe(exc))
        finally:
            conn.client = None
            conn.stop.set()
            conn.done.set()

    async def _on_message(self, conn: Connection, message: Any) -> None:
        """Notifications from the server: a changed tool list is listed again; an
        exception (a line that is not JSON-RPC) ends the connection."""
        if isinstance(message, Exception):
            self._drop(conn, f"it sent what is not MCP ({describe(message)})")
        elif isinstance(message, mt.ToolListChangedNotification):
            group = self._group
            if group is not None and conn.alive:
                done = anyio.Event()
                self._listing = done
                group.start_soon(self._relist, conn, done)

    async def _relist(self, conn: Connection, done: anyio.Event) -> None:
        try:
            with anyio.fail_after(self.timeout):
                self._set_tools(await self._list(conn))
        except Exception as exc:
            _log.warning("MCP server %r: listing its changed tools failed: %s", self.name, exc)
        finally:
            done.set()

    async def _listed(self) -> None:
        """Wait for a listing a ``list_changed`` started (a change during a call)."""
        listing = self._listing
        if listing is not None and not listing.is_set():
            with anyio.move_on_after(self.timeout):
                await listing.wait()

    async def _list(self, conn: Connection) -> tuple[MCPTool, ...]:
        client = conn.client
        if client is None:
            raise ToolsetError(f"MCP server {self.name!r}: not connected")
        found: list[mt.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            found += page.tools
            cursor = page.next_cursor
            if not cursor:
                break
        out: list[MCPTool] = []
        names: set[str] = set()
        for item in found:
            made = self._tool_of(item)
            if made is None:
                continue
            if made.name in names:
                _log.warning(
                    "MCP server %r: two of its tools are offered as %r; the second is left out",
                    self.name,
                    made.name,
                )
                continue
            names.add(made.name)
            out.append(made)
        return tuple(out)

    def _tool_of(self, item: mt.Tool) -> MCPTool | None:
        schema = item.input_schema if isinstance(item.input_schema, dict) else None
        if schema is None:
            _log.warning("MCP server %r: tool %r has no input schema", self.name, item.name)
            return None
        hints = item.annotations
        annotations = (
            hints.model_dump(mode="json", by_alias=True, exclude_none=True) if hints else {}
        )
        approval = self.approval
        read_only = hints is not None and hints.read_only_hint is True
        if (
            self.read_only_approval is not None
            and read_only
            and not (hints is not None and hints.destructive_hint is True)
        ):
            approval = self.read_only_approval
        idempotent = self.idempotent or (
            self.trust_idempotent_hint
            and hints is not None
            and (hints.idempotent_hint is True or read_only)
        )
        name = tool_name(item.name, self.prefix)
        try:
            bind = binder_from_spec(name, schema)
        except ToolDefinitionError:
            bind = _pass_through  # a schema this side cannot read: the server checks
        return MCPTool(
            name=name,
            description=item.description or "",
            parameters=schema,
            fn=_Remote(self, item.name, annotations),
            bind=bind,
            approval=approval,
            idempotent=idempotent,
            timeout=None,
        )

    def _set_tools(self, tools: tuple[MCPTool, ...]) -> None:
        old = [(t.name, t.definition(), t.approval, t.idempotent) for t in self._tools]
        new = [(t.name, t.definition(), t.approval, t.idempotent) for t in tools]
        self._tools = tools
        if old != new:
            for callback in list(self._listeners):
                try:
                    callback()
                except Exception:
                    _log.exception("MCP server %r: a tool-list listener raised", self.name)


_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,40}$")


def _pass_through(arguments: dict[str, Any]) -> dict[str, Any]:
    return arguments
