"""Conversations kept in other formats, imported into a :class:`ChatContext`.

Five sources, each with its own module and function (:func:`import_context`
picks one, :func:`detect_format` tells them apart, in :mod:`._detect`):

``session``  (:func:`import_session_records`, :mod:`._session_records`) the
    session JSON format: ``{"id", "title", "created_at", "updated_at",
    "records": [...]}`` (or the bare list of records) of message and tool call
    records.
``entries``  (:func:`import_conversation_entries`, :mod:`._conversation_entries`)
    the alternating conversation entries of a chat CLI: ``[{"user": {...},
    "assistant": {...}}, ...]`` (or ``{"entries": [...]}``), in that CLI's
    serde shape or a plain one.
``openai``   (:func:`import_openai_messages`, :mod:`._openai_messages`) a plain
    OpenAI Chat Completions ``messages`` list (or ``{"messages": [...],
    "model": ...}``).
``request``  (:func:`import_request_body`, :mod:`._request_body`) a chat request
    body (``contextManagement`` or ``messages``), through
    :func:`~turnfsm.adapters.inbound.parse_request`.
``chatcontext``  (:func:`import_chat_context`, :mod:`._chat_context`) the
    architecture's context document: a ``ChatContext`` as its fields
    (``message_pool``, ``branches``, ...) without turnfsm's ``schema_version``.
    Unlike the others it keeps its ids, its branches and its state (one at
    rest); its module says how.

A folder of session files (``{id}.json`` each, as the application that
writes the session JSON format keeps them) is read by
:func:`read_session_folder` (:mod:`._session_folder`): one context or one
:class:`SessionFileError` per file, the file's name as the context's id.

A context folder written by another program (``metadata.json``, ``message_index.json``,
``messages/{id}.json``), read by :func:`import_context_folder` (and every one
a ``data/`` or ``contexts/`` folder holds by :func:`import_context_folders`,
:mod:`._context_folder`) as a context document, so with the ``chatcontext``
rules; a problem is a :class:`ContextFolderError` naming the file and the JSON
path.

What they share: the checks that name the JSON path of a problem
(:mod:`._checks`) and the history being built (:mod:`._history`).

Every import but ``chatcontext`` gives a context in state ``Idle`` with one branch, ``main``, whose
messages are chained by ``parent_id``. Timestamps come from the source where it
has them, else from ``now`` (injected; by default the current UTC time; one
without an offset is taken as UTC). Message, context and system prompt ids come
from ``ids`` (default: uuid4 hex); tool call ids are the source's own.

Nothing is dropped silently:

- fields this module does not map are kept, verbatim, in the
  ``metadata.extra`` of the message they came with; fields of the whole source
  that a context has no place for (a session's ``id`` and ``title``, unknown
  top-level keys) go to ``metadata.extra["source"]`` of the first message;
- what cannot be converted raises :class:`~turnfsm.errors.InvalidInput`, whose
  ``where`` is the JSON path of the offending value (``$.records[3].role``);
- the source must hold only what a store can load back (the rules of
  :mod:`turnfsm.model._json`: nesting depth, string keys, finite numbers,
  valid Unicode text), and so must tool arguments given as JSON text; what
  breaks them is refused the same way, with its JSON path;
- an empty source (no record, entry or message) is refused: there would be
  nothing to import.

Tool calls: every call of an imported context ends with exactly one result, a
``tool`` message right after the assistant message that asked for it (and after
that message's other results), so the context rests in ``Idle`` with no open
call. A call whose result the source does not have gets one: ``{"error": "no
result in the imported history", "status": "missing"}`` with ``success=False``,
flagged ``metadata.extra["synthesized"] = True``, and the call itself is marked
``Denied`` by ``system`` with reason ``"missing"`` (as the engine does for the
calls it closes). A result that names no call of the message just before it is
an error. Calls that have a result are ``Approved`` (they ran); calls the chat
CLI of the conversation entries recorded as cancelled are ``Denied`` by
``human``.

Only the OpenAI import lifts a system prompt: a first ``system`` message with
plain text content and no other field becomes the branch's system prompt. In
the other formats system messages carry timestamps a system prompt cannot
hold, so they stay messages, as do later or annotated OpenAI system messages.
"""

from ._chat_context import import_chat_context
from ._context_folder import (
    ContextFolderError,
    FolderImport,
    context_folders,
    import_context_folder,
    import_context_folders,
)
from ._conversation_entries import import_conversation_entries
from ._detect import IMPORT_FORMATS, ImportFormat, count_tool_calls, detect_format, import_context
from ._history import MISSING_RESULT
from ._openai_messages import import_openai_messages
from ._request_body import import_request_body
from ._session_folder import (
    SESSION_SUFFIX,
    SessionFile,
    SessionFileError,
    file_name_problem,
    read_session_file,
    read_session_folder,
)
from ._session_records import import_session_records

__all__ = [
    "IMPORT_FORMATS",
    "MISSING_RESULT",
    "SESSION_SUFFIX",
    "ContextFolderError",
    "FolderImport",
    "ImportFormat",
    "SessionFile",
    "SessionFileError",
    "context_folders",
    "count_tool_calls",
    "detect_format",
    "file_name_problem",
    "import_chat_context",
    "import_context",
    "import_context_folder",
    "import_context_folders",
    "import_conversation_entries",
    "import_openai_messages",
    "import_request_body",
    "import_session_records",
    "read_session_file",
    "read_session_folder",
]
