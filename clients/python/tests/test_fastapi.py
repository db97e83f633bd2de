"""The FastAPI dependency's responses: headers on a route's own Response,
and its 429 without `denied_handler` (issue 30, item 9)."""

from __future__ import annotations

import json

import httpx
import pytest
import redis.asyncio
from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse

from redis_ratelimit import FixedWindow
from redis_ratelimit.web.core import QUOTA_EXCEEDED
from redis_ratelimit.web.fastapi import RateLimit, RateLimitHeaders

from .apps import parses


def app_with_routes(ar: redis.asyncio.Redis) -> FastAPI:
    app = FastAPI()
    limit = Depends(RateLimit(ar, FixedWindow(2, "1h")))

    @app.get("/own", dependencies=[limit])
    async def own() -> JSONResponse:
        return JSONResponse({"own": True}, headers={"X-Mine": "1"})

    @app.get("/plain", dependencies=[limit])
    async def plain() -> dict[str, bool]:
        return {"plain": True}

    return app


async def get_all(app: FastAPI, *paths: str) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app, client=("10.0.0.8", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        return [await http.get(path) for path in paths]


@pytest.mark.anyio
async def test_a_route_returning_its_own_response_keeps_the_headers(
    ar: redis.asyncio.Redis,
) -> None:
    app = app_with_routes(ar)
    app.add_middleware(RateLimitHeaders)
    own, plain = await get_all(app, "/own", "/plain")
    assert own.json() == {"own": True}
    assert own.headers["x-mine"] == "1"
    assert own.headers["x-ratelimit-remaining"] == "1"
    (ietf,) = own.headers.get_list("ratelimit")
    assert ietf.startswith('"fixedwindow";r=1;t=')
    assert plain.headers["x-ratelimit-remaining"] == "1"  # a route of its own: its own count
    parses(own.headers)


@pytest.mark.anyio
async def test_without_a_headers_writer_the_dependency_says_the_headers_are_lost(
    ar: redis.asyncio.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    app = app_with_routes(ar)
    own, _again = await get_all(app, "/own", "/own")  # the second: no second warning
    assert "x-ratelimit-remaining" not in own.headers  # FastAPI drops them
    assert caplog.text.count("loses the rate-limit headers") == 1
    assert "RateLimitHeaders" in caplog.text


@pytest.mark.anyio
async def test_the_429_without_denied_handler_is_one_json_document(
    ar: redis.asyncio.Redis,
) -> None:
    app = app_with_routes(ar)
    *_, denied = await get_all(app, "/plain", "/plain", "/plain")
    assert denied.status_code == 429
    assert denied.headers["content-type"] == "application/json"
    body = json.loads(denied.content)
    assert body["detail"]["type"] == QUOTA_EXCEEDED  # a document, not its text
    assert body["detail"]["status"] == 429
    assert "retry-after" in denied.headers
    parses(denied.headers)
