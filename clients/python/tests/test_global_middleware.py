"""The web middleware with a leased global limit among its limits: a WSGI
app (the Flask test client) and an ASGI app (httpx) limited by one
`GlobalLimit` / `AsyncGlobalLimit` for every client, denied over it with
the 429 and the headers any limit gets."""

from __future__ import annotations

import asyncio
import time

import flask
import httpx
import pytest
import redis
import redis.asyncio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from redis_ratelimit import AsyncGlobalLimit, FixedWindow, GlobalLimit, TokenBucket
from redis_ratelimit.web import RateLimitWSGIMiddleware
from redis_ratelimit.web.asgi import RateLimitMiddleware

WINDOW = '"fixedwindow";q=5;w=3600'


def flask_app(calls: list[str]) -> flask.Flask:
    app = flask.Flask(__name__)

    @app.route("/pay")
    def pay() -> str:
        calls.append("pay")
        return "paid"

    return app


def test_a_wsgi_app_limited_by_a_global_limit(r: redis.Redis) -> None:
    calls: list[str] = []
    app = flask_app(calls)
    with GlobalLimit(r, "global:pay", FixedWindow(5, "1h"), fail_open=False, timeout=2.0) as gl:
        app.wsgi_app = RateLimitWSGIMiddleware(  # type: ignore[method-assign]
            app.wsgi_app, redis=r, limits=gl
        )
        http = app.test_client()
        statuses = []
        for n in range(12):  # every client counts against the one limit
            response = http.get("/pay", environ_base={"REMOTE_ADDR": f"10.0.0.{n}"})
            statuses.append(response.status_code)
            if response.status_code == 200:
                assert response.headers["X-RateLimit-Limit"] == "5"
                assert response.headers["RateLimit-Policy"] == WINDOW
            time.sleep(0.01)
        denied = http.get("/pay", environ_base={"REMOTE_ADDR": "10.0.0.99"})
        stats = gl.stats()
    assert statuses.count(200) == 5 and calls == ["pay"] * 5
    assert denied.status_code == 429
    assert denied.headers["Content-Type"] == "application/problem+json"
    assert denied.headers["X-RateLimit-Limit"] == "5"
    assert denied.headers["X-RateLimit-Remaining"] == "0"
    assert denied.headers["RateLimit-Policy"] == WINDOW
    assert int(denied.headers["Retry-After"]) >= 1
    assert stats.spent == 5
    assert r.keys() == [b"global:pay"]  # no key per client


def test_a_request_another_limit_denies_gives_back_the_global_quota(r: redis.Redis) -> None:
    calls: list[str] = []
    app = flask_app(calls)
    with GlobalLimit(r, "global:pay2", FixedWindow(100, "1h")) as gl:
        app.wsgi_app = RateLimitWSGIMiddleware(  # type: ignore[method-assign]
            app.wsgi_app, redis=r, limits=[TokenBucket(1, 0.001, name="per-client"), gl]
        )
        http = app.test_client()
        first = http.get("/pay", environ_base={"REMOTE_ADDR": "10.0.0.1"})
        second = http.get("/pay", environ_base={"REMOTE_ADDR": "10.0.0.1"})
        stats = gl.stats()
    assert first.status_code == 200 and second.status_code == 429
    assert '"per-client"' in second.headers["RateLimit-Policy"]
    assert stats.spent == 1  # the denied request's unit went back


def test_an_async_global_limit_is_refused_by_the_wsgi_middleware(r: redis.Redis) -> None:
    app = flask_app([])
    port = r.connection_pool.connection_kwargs["port"]
    gl = AsyncGlobalLimit(redis.asyncio.Redis(port=port), "global:x", FixedWindow(5, "1h"))
    app.wsgi_app = RateLimitWSGIMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, redis=r, limits=gl
    )
    with pytest.raises(TypeError, match="AsyncGlobalLimit needs the ASGI"):
        app.test_client().get("/pay", environ_base={"REMOTE_ADDR": "10.0.0.1"})


@pytest.mark.anyio
async def test_an_asgi_app_limited_by_an_async_global_limit(ar: redis.asyncio.Redis) -> None:
    calls = 0

    async def pay(request: Request) -> PlainTextResponse:
        nonlocal calls
        calls += 1
        return PlainTextResponse("paid")

    async with AsyncGlobalLimit(
        ar, "global:apay", FixedWindow(5, "1h"), fail_open=False, timeout=2.0
    ) as gl:
        app = Starlette(
            routes=[Route("/pay", pay)],
            middleware=[Middleware(RateLimitMiddleware, redis=ar, limits=gl)],
        )
        statuses: list[int] = []
        for n in range(12):
            transport = httpx.ASGITransport(app=app, client=(f"10.0.0.{n}", 50000))
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                response = await http.get("/pay")
            statuses.append(response.status_code)
            if response.status_code == 200:
                assert response.headers["x-ratelimit-limit"] == "5"
                assert response.headers["ratelimit-policy"] == WINDOW
            await asyncio.sleep(0.01)
        transport = httpx.ASGITransport(app=app, client=("10.0.0.99", 50000))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            denied = await http.get("/pay")
        stats = gl.stats()
    assert statuses.count(200) == 5 and calls == 5
    assert denied.status_code == 429
    assert denied.headers["content-type"] == "application/problem+json"
    assert denied.headers["x-ratelimit-remaining"] == "0"
    assert denied.headers["ratelimit-policy"] == WINDOW
    assert int(denied.headers["retry-after"]) >= 1
    assert stats.spent == 5
    assert await ar.keys() == [b"global:apay"]
