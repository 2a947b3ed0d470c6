"""A context's conversation written in the formats the importers read
(:mod:`turnfsm.adapters.inbound.importers`), so that an import, an export and
an import again give the same messages.

Three formats, each with its own module and function (:func:`export_context`
picks one):

``session``  (:func:`export_session_records`, :mod:`._session_records`) the
    session JSON format: ``{"id", "title", "created_at", "updated_at",
    "records": [...]}`` of message and tool call records.
``entries``  (:func:`export_conversation_entries`, :mod:`._conversation_entries`)
    the alternating conversation entries of a chat CLI, ``{"entries": [{"user":
    {...}, "assistant": {...}}, ...]}``, in that CLI's serde shape.
``openai``   (:func:`export_openai_messages`, :mod:`._openai_messages`) an
    OpenAI Chat Completions ``messages`` list.

A whole folder of session files, ``{id}.json`` each, written atomically, with
what each context lost: :func:`write_session_file` (:mod:`._session_folder`).

What they share (:mod:`._common`):

- One branch is written: the active one, or the one named by ``branch``; a
  name the context does not have raises :class:`~turnfsm.errors.BranchError`.
  None of the formats has a place for branches.
- What an import kept verbatim in ``metadata.extra`` (the fields it did not
  map) is written back as fields of the element it came from, and the fields
  of the whole source it kept (``metadata.extra["source"]`` of the first
  message) at the top level; so an import of a file, its export and an import
  again give the same messages, with the same ``metadata.extra``. The fields
  a format fills itself win over a kept field of the same name. turnfsm's own
  notes (``synthesized``, ``conversions``) are not written.
- A result an import made up for a call whose result was missing
  (``metadata.extra["synthesized"]``) is not written where the format lets a
  call go without one (``entries``, ``openai``): the import makes it again.
- What a format has no place for is left out, never refused: each module's
  docstring lists it. Exports never raise for what a context holds.
- The value returned is ready for :func:`json.dumps`.
"""

from ._conversation_entries import export_conversation_entries
from ._export import EXPORT_FORMATS, ExportFormat, export_context
from ._openai_messages import export_openai_messages
from ._session_folder import (
    SessionExport,
    left_out,
    session_file_name,
    write_atomically,
    write_session_file,
)
from ._session_records import export_session_records, message_record, tool_record

__all__ = [
    "EXPORT_FORMATS",
    "ExportFormat",
    "SessionExport",
    "export_context",
    "export_conversation_entries",
    "export_openai_messages",
    "export_session_records",
    "left_out",
    "message_record",
    "session_file_name",
    "tool_record",
    "write_atomically",
    "write_session_file",
]
