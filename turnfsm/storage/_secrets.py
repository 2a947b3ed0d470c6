"""No message shows a store URL's password (``docs/storage.md``, "Store URLs").

:func:`redact` is a URL as messages give it; :func:`scrub` takes out of any
text the passwords of the URLs this process was given (a driver's error that
quotes one, say): the CLI passes every line it prints through it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["redact", "scrub"]

_SECRET_OPTION = re.compile(r"(?i)([?&](?:password|sslpassword)=)([^&#]*)")
_SECRETS: set[str] = set()
"""The passwords of the URLs given to :func:`redact` (and so to :func:`open_store`)."""


def redact(url: str) -> str:
    """The URL as a message may show it: its password (``user:PASSWORD@``, or
    a ``password`` / ``sslpassword`` option of the query) as ``***``. The
    part before the last ``@`` is the user part, however many ``@``, ``/`` or
    ``:`` the password holds, so no piece of it is left. Each password is
    also remembered for :func:`scrub`."""
    if not isinstance(url, str):
        return repr(url)
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    head, query_sep, query = rest.partition("?")
    user_part, at, host_part = head.rpartition("@")
    if at:
        user, colon, password = user_part.partition(":")
        if colon:
            _remember(password)
            head = f"{user}:***@{host_part}"
    if query_sep:
        for found in _SECRET_OPTION.finditer("?" + query):
            _remember(found.group(2))
        query = _SECRET_OPTION.sub(r"\1***", "?" + query)[1:]
    return f"{scheme}://{head}{query_sep}{query}"


def _remember(secret: str) -> None:
    if secret:
        _SECRETS.add(secret)
        decoded = unquote(secret)
        if decoded:
            _SECRETS.add(decoded)


def scrub(text: str) -> str:
    """``text`` with every password :func:`redact` saw replaced by ``***``."""
    for secret in sorted(_SECRETS, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, "***")
    return text
