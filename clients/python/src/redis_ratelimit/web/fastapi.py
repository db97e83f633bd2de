"""A FastAPI dependency: limits on one route, or on a router's routes.

``@app.get("/items", dependencies=[Depends(RateLimit(redis, "10/minute"))])``.
Each route counts apart: the default scope is the route's method and path
template (``GET /items/{id}``), so ``/items/1`` and ``/items/2`` share one
count; a ``scope=`` given on purpose is shared on purpose. A denial raises
`RateLimitDenied`, an ``HTTPException`` (FastAPI answers it 429 with the
headers and ``{"detail": ...}``); install `denied_handler` for the same
``application/problem+json`` body the middleware sends.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from fastapi import Request as FastAPIRequest
from fastapi import Response as FastAPIResponse
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from typing_extensions import Unpack

from ..kinds import require_async
from .asgi import asgi_request, decide_async
from .core import Limits, Response, Rule, RuleOptions, Verdict, layered_headers
from .guard import async_guard


class RateLimitDenied(HTTPException):
    """A request a `RateLimit` dependency denied; `response` is the one the
    rule made (problem+json by default)."""

    def __init__(self, response: Response) -> None:
        super().__init__(
            status_code=response.status,
            detail=response.body.decode(errors="replace"),
            headers={k: v for k, v in response.headers if k.lower() != "content-length"},
        )
        self.response = response


async def denied_handler(request: FastAPIRequest, exc: Exception) -> FastAPIResponse:
    """``app.add_exception_handler(RateLimitDenied, denied_handler)``: the
    rule's own response, body and all."""
    assert isinstance(exc, RateLimitDenied)
    r = exc.response
    return FastAPIResponse(r.body, status_code=r.status, headers=dict(r.headers))


class RateLimit:
    """A dependency that checks the request against a `Rule` (the arguments
    after `redis` are `Rule`'s); allowed responses get the headers."""

    def __init__(
        self,
        redis: Redis | RedisCluster,
        limits: Limits,
        **options: Unpack[RuleOptions],
    ) -> None:
        require_async(redis, "RateLimit", "a sync framework's decorator")
        self.rule = Rule(limits, **options)
        self.guard = async_guard(redis, self.rule.timeout, self.rule.cooldown)
        self.cluster = isinstance(redis, RedisCluster)

    async def __call__(self, request: FastAPIRequest, response: FastAPIResponse) -> None:
        route: Any = request.scope.get("route")
        path = getattr(route, "path", None) or request.url.path
        verdict: Verdict = await decide_async(
            self.rule,
            asgi_request(request.scope),
            self.guard,
            self.cluster,
            scope=f"{request.method} {path}",
        )
        if verdict.response is not None:
            raise RateLimitDenied(verdict.response)
        for name, value in layered_headers(request.scope):
            response.headers[name] = value
