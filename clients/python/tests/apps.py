"""Small apps the production tests put the middleware in front of."""

from __future__ import annotations

from typing import Any

import flask
import flask.testing
import http_sf
import redis
from redis.cluster import RedisCluster
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from redis_ratelimit.web import RateLimitMiddleware, RateLimitWSGIMiddleware


def flask_app(**options: Any) -> flask.Flask:
    app = flask.Flask(__name__)

    @app.route("/hello")
    def hello() -> str:
        return "hello"

    return app


def wsgi(
    app: flask.Flask, r: redis.Redis | RedisCluster, **options: Any
) -> flask.testing.FlaskClient:
    app.wsgi_app = RateLimitWSGIMiddleware(app.wsgi_app, redis=r, **options)  # type: ignore[method-assign]
    return app.test_client()


async def hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


def asgi(client: Any, **options: Any) -> Starlette:
    return Starlette(
        routes=[Route("/hello", hello)],
        middleware=[Middleware(RateLimitMiddleware, redis=client, **options)],
    )


def parses(headers: Any) -> None:
    """Every rate-limit field parses as the structured field it is."""
    for name in ("RateLimit", "RateLimit-Policy"):
        if name in headers:
            http_sf.parse(headers[name].encode(), tltype="list")
    for name in ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"):
        if name in headers:
            item: Any = http_sf.parse(headers[name].encode(), tltype="item")
            assert isinstance(item[0], int)
