"""L2: outbound formats: a context's conversation written in the formats the
importers read (:mod:`.exporters`, one module per format)."""

from .exporters import (
    EXPORT_FORMATS,
    ExportFormat,
    SessionExport,
    export_context,
    export_conversation_entries,
    export_openai_messages,
    export_session_records,
    left_out,
    write_session_file,
)

__all__ = [
    "EXPORT_FORMATS",
    "ExportFormat",
    "SessionExport",
    "export_context",
    "export_conversation_entries",
    "export_openai_messages",
    "export_session_records",
    "left_out",
    "write_session_file",
]
