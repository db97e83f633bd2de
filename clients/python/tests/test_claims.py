"""Two rules may not count into one key by accident; an app built twice is
not two rules (issue 30, items 7 and 15: app factories, test fixtures, and
two client objects of one server)."""

from __future__ import annotations

import gc
from typing import Any

import flask
import pytest
import redis
import redis.asyncio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from redis_ratelimit import FixedWindow, TokenBucket
from redis_ratelimit.web import RateLimitMiddleware, RateLimitWSGIMiddleware, Rule, api_key
from redis_ratelimit.web.flask import rate_limit

from .servers import Server


def create_flask_app(r: redis.Redis, site: int = 10, login: int = 3) -> flask.Flask:
    """An app factory as Flask's tutorial writes one: the views and their
    decorators made inside it, the middleware added to each app."""
    app = flask.Flask(__name__)

    @app.route("/login")
    @rate_limit(r, FixedWindow(login, "1h"), key=api_key())
    def login_view() -> str:
        return "login"

    app.wsgi_app = RateLimitWSGIMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, redis=r, rule=Rule(FixedWindow(site, "1h", name="site"))
    )
    return app


def test_an_app_factory_called_twice_in_one_process_builds_two_working_apps(
    r: redis.Redis,
) -> None:
    first = create_flask_app(r)
    second = create_flask_app(r)  # refused before: "would share the Redis keys"
    for app in (first, second):
        assert app.test_client().get("/login").status_code == 200
    # One rule built twice: both apps count into the same keys.
    assert sorted(r.keys()) == [
        b"rl:{ip:127.0.0.1}:site",
        b"rl:{ip:127.0.0.1}:tests.test_claims.create_flask_app.<locals>.login_view:fixedwindow",
    ]


def test_a_rebuilt_app_with_other_limits_takes_over_the_keys_of_one_gone(
    r: redis.Redis,
) -> None:
    first = create_flask_app(r, site=10)
    assert first.test_client().get("/login").status_code == 200
    del first
    gc.collect()
    second = create_flask_app(r, site=20, login=5)
    assert second.test_client().get("/login").headers["X-RateLimit-Limit"] == "5"


def test_a_rebuilt_app_whose_old_self_sits_in_a_reference_cycle_is_not_refused(
    r: redis.Redis,
) -> None:
    gc.disable()  # the old app stays until the collector runs, as between two tests
    try:
        first = create_flask_app(r, site=10)
        first.config["self"] = first  # a cycle: refcounting alone never frees it
        del first
        create_flask_app(r, site=20)
    finally:
        gc.enable()


def test_two_live_rules_that_differ_are_still_refused(r: redis.Redis) -> None:
    first = create_flask_app(r, site=10)
    with pytest.raises(ValueError, match="would share the Redis keys rl:\\{identity\\}:site"):
        create_flask_app(r, site=20)
    assert first.test_client().get("/login").status_code == 200


def hello(request: Any) -> PlainTextResponse:
    return PlainTextResponse("hello")


def create_asgi_app(client: redis.asyncio.Redis, capacity: int) -> Starlette:
    return Starlette(
        routes=[Route("/", hello)],
        middleware=[Middleware(RateLimitMiddleware, redis=client, limits=TokenBucket(capacity, 1))],
    )


def test_an_asgi_app_built_twice_works_twice(server: Server) -> None:
    client = redis.asyncio.Redis(port=server.port)
    for _ in range(2):
        with TestClient(create_asgi_app(client, 5)) as http:
            assert http.get("/").headers["X-RateLimit-Limit"] == "5"


def test_two_client_objects_of_one_server_are_one_server(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    one = redis.Redis(host="127.0.0.1", port=server.port)
    other = redis.Redis(host="localhost", port=server.port)  # another spelling, one server
    kept = RateLimitWSGIMiddleware(lambda e, s: [], redis=one, limits=TokenBucket(5, 1))
    RateLimitWSGIMiddleware(lambda e, s: [], redis=other, limits=TokenBucket(9, 1))
    assert "would share the Redis keys rl:{identity}:tokenbucket" in caplog.text
    assert "another client of the same Redis server" in caplog.text
    caplog.clear()
    # Another database of that server is other keys.
    third = redis.Redis(port=server.port, db=1)
    RateLimitWSGIMiddleware(lambda e, s: [], redis=third, limits=TokenBucket(7, 1))
    assert caplog.text == ""
    assert kept.rule.limits == (TokenBucket(5, 1),)
