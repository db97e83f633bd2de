"""The WSGI middleware and the Flask decorator, driven through Flask's test
client (a real WSGI client: Werkzeug builds the environ a server would)."""

from __future__ import annotations

from typing import Any

import flask
import pytest
import redis

from redis_ratelimit import Decision, FixedWindow, RateLimiter, SlidingLog, TokenBucket
from redis_ratelimit.web import RateLimitWSGIMiddleware, user
from redis_ratelimit.web.flask import rate_limit

from .servers import Server


def flask_app(calls: list[str]) -> flask.Flask:
    app = flask.Flask(__name__)

    @app.route("/hello")
    def hello() -> str:
        calls.append("hello")
        return "hello"

    return app


def get(app: flask.Flask, path: str, ip: str = "10.0.0.7", **environ: Any) -> Any:
    return app.test_client().get(path, environ_base={"REMOTE_ADDR": ip, **environ})


def test_the_middleware_limits_every_request_and_adds_the_headers(r: redis.Redis) -> None:
    calls: list[str] = []
    app = flask_app(calls)
    app.wsgi_app = RateLimitWSGIMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, redis=r, limits=TokenBucket(2, 0.5, name="hello")
    )
    first, second, third = (get(app, "/hello") for _ in range(3))
    assert first.status_code == 200 and first.text == "hello"
    assert (
        first.headers["X-RateLimit-Remaining"] == "1"
        and second.headers["X-RateLimit-Remaining"] == "0"
    )
    assert first.headers["RateLimit"] == '"hello";r=1;t=2'
    assert third.status_code == 429 and third.headers["Retry-After"] == "2"
    assert third.headers["Content-Type"] == "application/problem+json"
    assert third.json == {
        "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
        "title": "Request cannot be satisfied as assigned quota has been exceeded",
        "status": 429,
        "detail": "Too many requests: retry in 2 s.",
    }
    assert calls == ["hello", "hello"]
    assert get(app, "/hello", ip="10.0.0.8").status_code == 200  # another client
    assert sorted(r.keys()) == [b"rl:{ip:10.0.0.7}:hello", b"rl:{ip:10.0.0.8}:hello"]


def test_the_user_key_follows_remote_user_under_wsgi(r: redis.Redis) -> None:
    app = flask_app([])
    app.wsgi_app = RateLimitWSGIMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, redis=r, limits=FixedWindow(1, "1h"), key=user(fallback=None)
    )
    assert get(app, "/hello", REMOTE_USER="alice").status_code == 200
    assert get(app, "/hello", REMOTE_USER="alice").status_code == 429
    assert get(app, "/hello").status_code == 200  # anonymous, and no fallback: not limited
    assert r.keys() == [b"rl:{user:alice}:fixedwindow"]


def test_the_decorator_limits_each_view_apart_unless_they_share_a_scope(r: redis.Redis) -> None:
    app = flask.Flask(__name__)
    limit = rate_limit(r, FixedWindow(1, "1h"))
    shared = rate_limit(r, FixedWindow(1, "1h"), scope="reports")

    @app.route("/a")
    @limit
    def a() -> str:
        return "a"

    @app.route("/b")
    @limit
    def b() -> str:
        return "b"

    @app.route("/c")
    @shared
    def c() -> str:
        return "c"

    @app.route("/d")
    @shared
    def d() -> str:
        return "d"

    assert [get(app, p).status_code for p in ("/a", "/b", "/a", "/c", "/d")] == [
        200,
        200,
        429,
        200,
        429,
    ]
    here = f"{__name__}.test_the_decorator_limits_each_view_apart_unless_they_share_a_scope"
    assert sorted(r.keys()) == [
        b"rl:{ip:10.0.0.7}:reports:fixedwindow",
        f"rl:{{ip:10.0.0.7}}:{here}.<locals>.a:fixedwindow".encode(),
        f"rl:{{ip:10.0.0.7}}:{here}.<locals>.b:fixedwindow".encode(),
    ]


def test_the_decorator_adds_the_headers_and_a_denied_view_does_not_run(r: redis.Redis) -> None:
    app = flask.Flask(__name__)
    runs: list[int] = []

    @app.route("/report")
    @rate_limit(r, [TokenBucket(1, 0.001, name="burst"), SlidingLog(5, "1m", name="minute")])
    def report() -> str:
        runs.append(1)
        return "report"

    ok, denied = get(app, "/report"), get(app, "/report")
    assert (
        ok.status_code == 200
        and ok.headers["RateLimit-Policy"] == '"burst";q=1;w=1000, "minute";q=5;w=60'
    )
    assert denied.status_code == 429 and denied.headers["X-RateLimit-Remaining"] == "0"
    assert runs == [1]


@pytest.mark.parametrize(("fail_open", "status"), [(True, 200), (False, 503)])
def test_unreachable_redis_fails_as_chosen_under_wsgi(
    down: tuple[redis.Redis, Any], fail_open: bool, status: int
) -> None:
    calls: list[str] = []
    app = flask_app(calls)
    app.wsgi_app = RateLimitWSGIMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, redis=down[0], limits=FixedWindow(1, "1h"), fail_open=fail_open
    )
    response = get(app, "/hello")
    assert response.status_code == status
    assert "X-RateLimit-Limit" not in response.headers
    assert calls == (["hello"] if fail_open else [])


@pytest.mark.parametrize(("fail_open", "status"), [(True, 200), (False, 503)])
def test_unreachable_redis_fails_as_chosen_in_the_decorator(
    down: tuple[redis.Redis, Any], fail_open: bool, status: int
) -> None:
    app = flask.Flask(__name__)

    @app.route("/x")
    @rate_limit(down[0], FixedWindow(1, "1h"), fail_open=fail_open)
    def x() -> str:
        return "x"

    assert get(app, "/x").status_code == status


@pytest.mark.parametrize(("fail_open", "status"), [(True, 200), (False, 503)])
def test_a_server_out_of_memory_for_a_new_key_fails_as_chosen(fail_open: bool, status: int) -> None:
    server = Server()
    try:
        client = redis.Redis(port=server.port)
        # noeviction, and a limit below what the server already uses: the
        # module refuses to create a key with Redis's OOM error.
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", 1)
        calls: list[str] = []
        app = flask_app(calls)
        app.wsgi_app = RateLimitWSGIMiddleware(  # type: ignore[method-assign]
            app.wsgi_app, redis=client, limits=FixedWindow(1, "1h"), fail_open=fail_open
        )
        assert get(app, "/hello").status_code == status
        assert calls == (["hello"] if fail_open else [])
    finally:
        server.stop()


def test_two_limits_of_one_name_are_refused_when_the_rule_is_made(r: redis.Redis) -> None:
    with pytest.raises(ValueError, match="must differ"):
        rate_limit(r, [FixedWindow(1, "1s"), FixedWindow(10, "1m")])(lambda: "x")


def test_a_shadow_rule_under_wsgi_lets_everything_through_and_tells_the_hook(
    r: redis.Redis,
) -> None:
    seen: list[Decision] = []
    app = flask_app([])
    app.wsgi_app = RateLimitWSGIMiddleware(  # type: ignore[method-assign]
        app.wsgi_app,
        redis=r,
        limits=FixedWindow(1, "1h"),
        shadow=True,
        on_shadow_denied=lambda request, decision: seen.append(decision),
    )
    assert [get(app, "/hello").status_code for _ in range(3)] == [200, 200, 200]
    assert len(seen) == 2 and all(d.shadow_denied for d in seen)


def test_a_penalty_in_the_decorator(r: redis.Redis) -> None:
    app = flask.Flask(__name__)

    @app.route("/strict")
    @rate_limit(r, FixedWindow(1, "1h"), penalty="1m", scope="strict")
    def strict() -> str:
        return "strict"

    assert [get(app, "/strict").status_code for _ in range(2)] == [200, 429]
    info = RateLimiter(r).info("rl:{ip:10.0.0.7}:strict:fixedwindow")
    assert info is not None and info.penalty_until is not None
