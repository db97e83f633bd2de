"""A view's own limit under a site-wide one: the binding limit's fields go
out, each once (issue 30, item 8), in Django, Flask and FastAPI."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import flask
import httpx
import pytest
import redis
import redis.asyncio
from fastapi import Depends, FastAPI

from redis_ratelimit import FixedWindow
from redis_ratelimit.web import RateLimitMiddleware, RateLimitWSGIMiddleware, Rule

from .apps import parses
from .test_frameworks import django_settings

FIELDS = ["X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit"]
FIELDS += ["RateLimit-Policy"]

__all__ = ["django_settings"]


def login(request: Any) -> Any:
    from django.http import HttpResponse

    return HttpResponse("welcome")


urlpatterns: list[Any] = []


@pytest.fixture
def django_login(django_settings: None, r: redis.Redis) -> Iterator[None]:
    from django.test import override_settings
    from django.urls import clear_url_caches, path

    from redis_ratelimit.web.django import rate_limit

    limited = rate_limit(r, FixedWindow(3, "1h", name="login"), penalty="1h")(login)
    urlpatterns[:] = [path("login", limited)]
    conf = {"redis": r, "rule": Rule(FixedWindow(10, "1h", name="site"))}
    middleware = ["redis_ratelimit.web.django.RateLimitMiddleware"]
    clear_url_caches()
    with override_settings(ROOT_URLCONF=__name__, MIDDLEWARE=middleware, REDIS_RATELIMIT=conf):
        yield
    clear_url_caches()


def test_djangos_decorator_under_the_middleware_sends_the_denying_limits_fields(
    django_login: None,
) -> None:
    from django.test import Client

    client = Client()
    responses = [client.get("/login") for _ in range(4)]
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    allowed, denied = responses[2], responses[3]
    # Allowed: the login limit binds (0 left of 3, where the site has 7 of 10).
    assert (allowed["X-RateLimit-Limit"], allowed["X-RateLimit-Remaining"]) == ("3", "0")
    assert (denied["X-RateLimit-Limit"], denied["X-RateLimit-Remaining"]) == ("3", "0")
    assert 3590 <= int(denied["Retry-After"]) <= 3600
    items = [item.split(";")[:2] for item in denied["RateLimit"].split(", ")]
    assert items == [['"site"', "r=6"], ['"login"', "r=0"]]
    assert denied["RateLimit-Policy"] == '"site";q=10;w=3600, "login";q=3;w=3600'
    # (A Django response holds one value per field: the bug was the wrong one.)
    parses(denied)


def flask_app(r: redis.Redis) -> flask.Flask:
    from redis_ratelimit.web.flask import rate_limit

    app = flask.Flask(__name__)

    @app.route("/login")
    @rate_limit(r, FixedWindow(3, "1h", name="login"), penalty="1h")
    def login_view() -> str:
        return "welcome"

    app.wsgi_app = RateLimitWSGIMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, redis=r, rule=Rule(FixedWindow(10, "1h", name="site"))
    )
    return app


def test_flasks_decorator_under_the_wsgi_middleware_sends_each_field_once(
    r: redis.Redis,
) -> None:
    http = flask_app(r).test_client()
    responses = [http.get("/login") for _ in range(4)]
    assert [x.status_code for x in responses] == [200, 200, 200, 429]
    for response in responses:
        for name in FIELDS:
            assert len(response.headers.getlist(name)) == 1, (name, response.headers)
        assert response.headers["X-RateLimit-Limit"] == "3"
        parses(response.headers)
    assert responses[1].headers["X-RateLimit-Remaining"] == "1"
    denied = responses[3].headers
    assert len(denied.getlist("Retry-After")) == 1
    assert 3590 <= int(denied["Retry-After"]) <= 3600
    assert denied["RateLimit-Policy"] == '"site";q=10;w=3600, "login";q=3;w=3600'


def test_the_site_limit_binds_when_it_has_less_left(r: redis.Redis) -> None:
    from redis_ratelimit.web.flask import rate_limit

    app = flask.Flask(__name__)

    @app.route("/search")
    @rate_limit(r, FixedWindow(100, "1h", name="search"))
    def search() -> str:
        return "found"

    app.wsgi_app = RateLimitWSGIMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, redis=r, rule=Rule(FixedWindow(2, "1h", name="site"), scope="bind")
    )
    http = app.test_client()
    first = http.get("/search").headers
    assert (first["X-RateLimit-Limit"], first["X-RateLimit-Remaining"]) == ("2", "1")


@pytest.mark.anyio
async def test_a_fastapi_dependency_under_the_asgi_middleware_sends_each_field_once(
    ar: redis.asyncio.Redis,
) -> None:
    from redis_ratelimit.web.fastapi import RateLimit

    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, redis=ar, rule=Rule(FixedWindow(10, "1h", name="site")))

    @app.get("/login", dependencies=[Depends(RateLimit(ar, FixedWindow(3, "1h", name="login")))])
    async def login_route() -> dict[str, str]:
        return {"welcome": "yes"}

    transport = httpx.ASGITransport(app=app, client=("10.0.0.9", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        responses = [await http.get("/login") for _ in range(4)]
    assert [x.status_code for x in responses] == [200, 200, 200, 429]
    for response in responses:
        for name in FIELDS:
            assert len(response.headers.get_list(name)) == 1, (name, response.headers)
        assert response.headers["x-ratelimit-limit"] == "3"
    assert len(responses[3].headers.get_list("retry-after")) == 1
