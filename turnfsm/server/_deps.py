"""What the API's routes take from a request: the hub, the caller's tenant, a
context of that tenant (FastAPI dependencies, shared by every router)."""

from typing import Annotated, cast

from fastapi import Depends, Query, Request

from ._errors import ApiError
from ._hub import Hub
from ._tenants import DEFAULT_TENANT, tenant_of_token

__all__ = ["HubOf", "Owned", "Tenant", "Wait", "hub_of", "owned", "tenant"]


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
