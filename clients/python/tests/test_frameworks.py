"""The FastAPI dependency and the Django middleware and decorator, through
each framework's own request handling, against the real server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import django
import httpx
import pytest
import redis
import redis.asyncio
from django.conf import settings
from fastapi import Depends, FastAPI

from redis_ratelimit import FixedWindow, TokenBucket
from redis_ratelimit.web import RateLimitMiddleware, exempt_paths
from redis_ratelimit.web.core import QUOTA_EXCEEDED
from redis_ratelimit.web.fastapi import RateLimit, RateLimitDenied, denied_handler

from .apps import parses
from .servers import Server


@pytest.mark.anyio
async def test_a_fastapi_dependency_limits_each_route_apart(ar: redis.asyncio.Redis) -> None:
    app = FastAPI()
    app.add_exception_handler(RateLimitDenied, denied_handler)
    per_route = Depends(RateLimit(ar, "2 per minute"))

    @app.get("/items/{item}", dependencies=[per_route])
    async def item(item: int) -> dict[str, int]:
        return {"item": item}

    @app.get("/other", dependencies=[per_route])
    async def other() -> dict[str, str]:
        return {"other": "yes"}

    transport = httpx.ASGITransport(app=app, client=("10.0.0.7", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        items = [await http.get(f"/items/{i}") for i in range(3)]
        elsewhere = await http.get("/other")
    assert [i.status_code for i in items] == [200, 200, 429]
    assert items[0].json() == {"item": 0}
    assert items[0].headers["x-ratelimit-remaining"] == "1"
    denied = items[2]
    assert denied.headers["content-type"] == "application/problem+json"
    assert denied.json()["type"] == QUOTA_EXCEEDED
    assert "retry-after" in denied.headers
    parses(denied.headers)
    assert elsewhere.status_code == 200  # another route, another count
    assert sorted(await ar.keys()) == [
        b"rl:{ip:10.0.0.7}:GET /items/{item}:2-per-minute",
        b"rl:{ip:10.0.0.7}:GET /other:2-per-minute",
    ]


@pytest.fixture(scope="module")
def django_settings() -> None:
    if not settings.configured:
        settings.configure(
            ROOT_URLCONF=__name__,
            ALLOWED_HOSTS=["testserver"],
            MIDDLEWARE=[],
            REDIS_RATELIMIT={},
        )
        django.setup()


def view(request: Any) -> Any:
    from django.http import HttpResponse

    return HttpResponse("hello")


urlpatterns: list[Any] = []


@pytest.fixture
def django_urls(django_settings: None, r: redis.Redis) -> Iterator[redis.Redis]:
    from django.urls import clear_url_caches, path

    from redis_ratelimit.web.django import rate_limit

    limited = rate_limit(r, FixedWindow(2, "1h"))(view)
    urlpatterns[:] = [path("hello", view), path("limited", limited), path("health", view)]
    clear_url_caches()
    yield r
    urlpatterns.clear()


def test_the_django_middleware_limits_every_request_with_djangos_test_client(
    django_urls: redis.Redis,
) -> None:
    from django.test import Client, override_settings

    conf = {"redis": django_urls, "limits": TokenBucket(2, 0.01), "exempt": exempt_paths("/health")}
    middleware = ["redis_ratelimit.web.django.RateLimitMiddleware"]
    with override_settings(MIDDLEWARE=middleware, REDIS_RATELIMIT=conf):
        client = Client()
        codes = [client.get("/hello") for _ in range(3)]
        health = [client.get("/health").status_code for _ in range(3)]
    assert [c.status_code for c in codes] == [200, 200, 429]
    assert codes[0]["X-RateLimit-Remaining"] == "1"
    assert codes[2]["Content-Type"] == "application/problem+json"
    assert json.loads(codes[2].content)["status"] == 429
    assert health == [200, 200, 200]
    assert django_urls.keys() == [b"rl:{ip:127.0.0.1}:tokenbucket"]


def test_the_django_decorator_limits_one_view(django_urls: redis.Redis, server: Server) -> None:
    from django.test import Client

    client = Client()
    assert [client.get("/limited").status_code for _ in range(3)] == [200, 200, 429]
    assert client.get("/hello").status_code == 200
    assert django_urls.keys() == [b"rl:{ip:127.0.0.1}:tests.test_frameworks.view:fixedwindow"]


def test_starlettes_test_client_works_without_with(server: Server) -> None:
    # Without `with`, TestClient runs each request in a new event loop: the
    # middleware's connections follow (issue 21, item 11).
    from fastapi.testclient import TestClient

    app = FastAPI()
    client = redis.asyncio.Redis(port=server.port)
    app.add_middleware(RateLimitMiddleware, redis=client, limits=TokenBucket(2, 0.01))

    @app.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    http = TestClient(app)
    responses = [http.get("/hello") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert responses[1].headers["x-ratelimit-remaining"] == "0"
