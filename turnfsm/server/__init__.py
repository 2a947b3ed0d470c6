"""L4: the engine over HTTP (FastAPI, uvicorn, sse-starlette); see ``docs/server.md``.

Only this package imports ``fastapi``, ``starlette``, ``sse_starlette`` and
``uvicorn`` (install them with ``pip install 'turnfsm[server]'``).
"""

from __future__ import annotations

from ._app import create_app
from ._config import DEFAULT_MAX_BODY, ServerConfig
from ._hub import Hub
from ._tenants import DEFAULT_TENANT, TOKENS_ENV, TenantTable, load_tokens, parse_tokens

__all__ = [
    "DEFAULT_MAX_BODY",
    "DEFAULT_TENANT",
    "TOKENS_ENV",
    "Hub",
    "ServerConfig",
    "TenantTable",
    "create_app",
    "load_tokens",
    "parse_tokens",
]
