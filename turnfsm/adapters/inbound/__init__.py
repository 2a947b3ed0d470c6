"""L2: inbound formats: the chat request bodies, ``contextManagement`` and
``messages`` (:mod:`._request`), and conversations kept in other formats,
imported into a ChatContext (:mod:`.importers`, one module per format).

The importers are loaded when one of their names is first asked for: the
engine needs only the request bodies."""

from typing import TYPE_CHECKING

from ..._lazy import lazy_names
from ._request import (
    InboundFormat,
    InboundMessage,
    InboundRequest,
    UnknownKeyRule,
    format_error_path,
    parse_request,
    said,
    said_by,
)

if TYPE_CHECKING:
    from .importers import (
        IMPORT_FORMATS,
        MISSING_RESULT,
        ContextFolderError,
        FolderImport,
        ImportFormat,
        context_folders,
        count_tool_calls,
        detect_format,
        import_chat_context,
        import_context,
        import_context_folder,
        import_context_folders,
        import_conversation_entries,
        import_openai_messages,
        import_request_body,
        import_session_records,
    )

__all__ = [
    "IMPORT_FORMATS",
    "MISSING_RESULT",
    "ContextFolderError",
    "FolderImport",
    "ImportFormat",
    "InboundFormat",
    "InboundMessage",
    "InboundRequest",
    "UnknownKeyRule",
    "context_folders",
    "count_tool_calls",
    "detect_format",
    "format_error_path",
    "import_chat_context",
    "import_context",
    "import_context_folder",
    "import_context_folders",
    "import_conversation_entries",
    "import_openai_messages",
    "import_request_body",
    "import_session_records",
    "parse_request",
    "said",
    "said_by",
]


_IMPORTERS = frozenset(
    {
        "IMPORT_FORMATS",
        "MISSING_RESULT",
        "ContextFolderError",
        "FolderImport",
        "ImportFormat",
        "context_folders",
        "count_tool_calls",
        "detect_format",
        "import_chat_context",
        "import_context",
        "import_context_folder",
        "import_context_folders",
        "import_conversation_entries",
        "import_openai_messages",
        "import_request_body",
        "import_session_records",
    }
)


__getattr__ = lazy_names(__name__, dict.fromkeys(_IMPORTERS, ".importers"))
