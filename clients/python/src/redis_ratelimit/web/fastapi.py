"""A FastAPI dependency: limits on one route, or on a router's routes.

``@app.get("/items", dependencies=[Depends(RateLimit(redis, "10/minute"))])``.
Each route counts apart: the default scope is the route's method and path
template (``GET /items/{id}``), so ``/items/1`` and ``/items/2`` share one
count; a ``scope=`` given on purpose is shared on purpose. A denial raises
`RateLimitDenied`, an ``HTTPException``: FastAPI answers it 429 with the
headers and ``{"detail": <the problem document>}`` as ``application/json``;
install `denied_handler` for the ``application/problem+json`` body itself,
as the middleware sends it.

An allowed request's headers go on the response through FastAPI's
``Response`` parameter, which FastAPI drops when a route returns a
``Response`` of its own (a ``JSONResponse``): add `RateLimitHeaders`
(``app.add_middleware(RateLimitHeaders)``), or the ASGI middleware, and
every response gets them. The dependency warns once when neither is there.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from fastapi import HTTPException
from fastapi import Request as FastAPIRequest
from fastapi import Response as FastAPIResponse
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from typing_extensions import Unpack

from ..kinds import require_async
from .asgi import (
    HEADERS_WRITTEN,
    ASGIApp,
    Receive,
    Scope,
    Send,
    asgi_request,
    decide_async,
    headers_writer,
)
from .core import Limits, Response, Rule, RuleOptions, Verdict, layered_headers, logger
from .guard import async_guard


class RateLimitDenied(HTTPException):
    """A request a `RateLimit` dependency denied; `response` is the one the
    rule made (problem+json by default)."""

    def __init__(self, response: Response) -> None:
        # FastAPI's own handler sends {"detail": detail} as application/json:
        # the detail is the document itself (not its text, encoded twice),
        # and the rule's Content-Type is not sent over a body it no longer
        # describes.
        detail: Any = response.body.decode(errors="replace")
        with contextlib.suppress(ValueError):
            detail = json.loads(detail)
        super().__init__(
            status_code=response.status,
            detail=detail,
            headers={
                k: v
                for k, v in response.headers
                if k.lower() not in ("content-length", "content-type")
            },
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
        self._warned = False

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
        if not request.scope.get(HEADERS_WRITTEN) and not self._warned:
            self._warned = True
            logger.warning(
                "rate limit %s on %s: a route that returns its own Response (JSONResponse, ...) "
                "loses the rate-limit headers, which FastAPI drops from the dependency's "
                "Response; add app.add_middleware(RateLimitHeaders) (redis_ratelimit.web."
                "fastapi) so every response gets them",
                self.rule.names,
                path,
            )


class RateLimitHeaders:
    """An ASGI middleware that writes the rate-limit headers of every rule
    that decided on a request (`RateLimit` dependencies) on its response,
    whatever the route returned: ``app.add_middleware(RateLimitHeaders)``.
    It asks Redis nothing. (`RateLimitMiddleware` does this too.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, headers_writer(scope, send))
