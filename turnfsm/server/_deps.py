"""What the API's routes take from a request: the hub, the caller's tenant, a
context of that tenant (FastAPI dependencies, shared by every router)."""

from typing import Annotated, cast

from fastapi import Depends, Query, Request
from pydantic import BeforeValidator

from .._numbers import whole_number
from ._errors import ApiError
from ._hub import Hub
from ._tenants import DEFAULT_TENANT, tenant_of_token

__all__ = [
    "MAX_CURSOR",
    "HubOf",
    "Owned",
    "Tenant",
    "Wait",
    "cursor_of",
    "digits",
    "hub_of",
    "owned",
    "tenant",
]

MAX_CURSOR = 10**12
"""The largest page cursor a client may give back."""


def hub_of(request: Request) -> Hub:
    """The app's hub (``create_app`` puts it in ``app.state``)."""
    return cast(Hub, request.app.state.hub)


async def _hub(request: Request) -> Hub:
    # async: FastAPI runs a plain function dependency in a worker thread
    return hub_of(request)


async def tenant(request: Request) -> str:
    """The caller's tenant: the one of its bearer token (``401`` without a
    valid one); with no tokens configured, the one tenant."""
    tokens = hub_of(request).config.tokens
    if not tokens:
        return DEFAULT_TENANT
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    found = tenant_of_token(tokens, token.strip()) if scheme.lower() == "bearer" else None
    if found is None:
        raise ApiError(401, "unauthorized", "a valid bearer token is required")
    return found


async def owned(context_id: str, request: Request) -> str:
    """The path's context, when the caller's tenant owns it (else ``404``)."""
    # the tenant read here rather than through Depends(tenant): one level
    # of dependency less on every call about a context
    await hub_of(request).check(context_id, await tenant(request))
    return context_id


HubOf = Annotated[Hub, Depends(_hub)]
Tenant = Annotated[str, Depends(tenant)]
Owned = Annotated[str, Depends(owned)]
Wait = Annotated[bool, Query(description="return the Turn once the context rests")]


def digits(name: str, lo: int, hi: int) -> BeforeValidator:
    """What reads a query parameter that is a whole number from ``lo`` to
    ``hi``: :func:`~turnfsm._numbers.whole_number` (``422`` naming it
    otherwise), put before FastAPI's ``int``, which takes ``+5``, `` 5`` or
    ``5_0``. Use as ``Annotated[int, Query(ge=lo, le=hi), digits(...)]``: the
    OpenAPI document still says ``integer`` with its bounds."""

    def parse(value: object) -> object:
        if isinstance(value, str):
            try:
                return whole_number(value, f"query.{name}", lo, hi)
            except ValueError as exc:
                raise ValueError(getattr(exc, "reason", str(exc))) from None
        return value

    return BeforeValidator(parse)


def cursor_of(cursor: str | None) -> int | None:
    """A page cursor the server gave (``?cursor=``; none or empty: ``None``)."""
    if cursor is None or cursor == "":
        return None
    return whole_number(cursor, "query.cursor", 0, MAX_CURSOR)
