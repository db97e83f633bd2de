"""Issue 21's new rule features, against real servers: `By` (several
identities in one rule, on a server and on the cluster), what a rule does
with a request without an identity, rate strings, `validate`, and the
wrong kind of client."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.cluster import RedisCluster

from redis_ratelimit import (
    FixedWindow,
    InvalidArgumentError,
    ModuleNotLoadedError,
    RateLimiter,
    SlidingCounter,
    TokenBucket,
)
from redis_ratelimit.web import By, RateLimitWSGIMiddleware, Request, Rule, api_key

from .apps import asgi, flask_app, parses, wsgi
from .servers import Cluster, Server, free_port


def test_a_rule_may_refuse_or_exempt_requests_without_an_identity(r: redis.Redis) -> None:
    no_address = {"REMOTE_ADDR": ""}
    refusing = wsgi(
        flask_app(), r, limits=FixedWindow(3, "1h"), on_missing_identity="refuse", scope="strict"
    )
    assert refusing.get("/hello", environ_overrides=no_address).status_code == 403
    exempting = wsgi(
        flask_app(), r, limits=FixedWindow(3, "1h"), on_missing_identity="exempt", scope="open"
    )
    assert all(
        exempting.get("/hello", environ_overrides=no_address).status_code == 200 for _ in range(5)
    )


# 6. One rule, several identities -------------------------------------------


def test_one_rule_checks_the_address_and_the_api_key_at_once_all_or_nothing(
    r: redis.Redis,
) -> None:
    http = wsgi(
        flask_app(),
        r,
        limits=[
            TokenBucket(5, 0.001, name="ip"),
            By(api_key(fallback=None), FixedWindow(3, "1h", name="key")),
        ],
    )
    codes = [http.get("/hello", headers={"X-Api-Key": "k"}) for _ in range(4)]
    assert [c.status_code for c in codes] == [200, 200, 200, 429]
    denied = codes[3]
    assert denied.headers.getlist("X-RateLimit-Limit") == ["3"]  # one set, the key's
    # The key's denial took nothing from the address's bucket: 5 - 3 left 2.
    assert (
        RateLimiter(r).peek("rl:{ip:127.0.0.1}:ip", TokenBucket(5, 0.001, name="ip")).remaining == 2
    )
    parses(denied.headers)


def test_on_a_cluster_each_identity_is_one_rl_all_in_order(cluster: Cluster) -> None:
    rc = RedisCluster(host="127.0.0.1", port=cluster.port)
    rc.flushall()
    http = wsgi(
        flask_app(),
        rc,
        limits=[
            TokenBucket(5, 0.001, name="ip"),
            By(
                api_key(fallback=None),
                FixedWindow(3, "1h", name="key"),
                FixedWindow(9, "1d", name="day"),
            ),
        ],
        timeout=1.0,
    )
    codes = [http.get("/hello", headers={"X-Api-Key": "k"}).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    ip = RateLimiter(rc).peek("rl:{ip:127.0.0.1}:ip", TokenBucket(5, 0.001, name="ip"))
    # The address's RL.ALL went first and was spent on the fourth request too:
    # all or nothing holds within one identity, not across two slots.
    assert ip.remaining == 1
    day = RateLimiter(rc).peek(
        "rl:{" + str(api_key()(_req("k"))) + "}:day",
        FixedWindow(9, "1d", name="day"),
    )
    assert day.remaining == 6  # the key's two limits: all or nothing
    rc.close()


def _req(value: str) -> Request:
    return Request("GET", "/", {"x-api-key": value}, None, None, {})


def test_an_async_client_in_wsgi_is_a_type_error_naming_the_fix(server: Server) -> None:
    with pytest.raises(TypeError, match=r"give it redis.Redis\(...\)"):
        RateLimitWSGIMiddleware(
            flask_app().wsgi_app,
            redis=redis.asyncio.Redis(port=server.port),  # type: ignore[arg-type]
            limits=TokenBucket(5, 1),
        )


@pytest.mark.anyio
async def test_validate_asks_the_server_about_each_limit_at_boot(
    r: redis.Redis, ar: redis.asyncio.Redis
) -> None:
    good = Rule([TokenBucket(5, 1), SlidingCounter(10, 60, precision=10)])
    good.validate(r)
    await good.validate(ar)
    assert r.dbsize() == 0  # peeks write nothing
    bad = Rule(SlidingCounter(10, 60, precision=1001))
    with pytest.raises(InvalidArgumentError, match="PRECISION"):
        bad.validate(r)
    with pytest.raises(InvalidArgumentError, match="PRECISION"):
        await bad.validate(ar)
    bare = Server(module=False)
    try:
        with pytest.raises(ModuleNotLoadedError):
            good.validate(redis.Redis(port=bare.port))
    finally:
        bare.stop()


def test_rate_strings_are_limits_like_any_other(r: redis.Redis) -> None:
    http = wsgi(flask_app(), r, limits="2/second; 3 per minute")
    codes = [http.get("/hello").status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    assert codes and http.get("/hello").headers["RateLimit-Policy"] == (
        '"2-per-second";q=2;w=1, "3-per-minute";q=3;w=60'
    )
    with pytest.raises(ValueError, match="rate '10 per fortnight'"):
        Rule("10 per fortnight")


async def lifespan_startup(app: Any) -> list[dict[str, Any]]:
    """Runs an ASGI lifespan startup as a server does; the messages sent
    until startup completed (or the app's exception)."""
    incoming: list[dict[str, Any]] = [{"type": "lifespan.startup"}]
    sent: list[dict[str, Any]] = []
    started = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop()
        await asyncio.sleep(3600)  # the server never shuts down in this test
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        started.set()

    task = asyncio.ensure_future(
        app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
    )
    waiting = asyncio.ensure_future(started.wait())
    await asyncio.wait([task, waiting], return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if task.done():
        task.result()  # raises the app's exception
    answered = list(sent)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return answered


@pytest.mark.anyio
async def test_the_asgi_middleware_asks_the_server_about_its_rule_at_startup(
    ar: redis.asyncio.Redis,
) -> None:
    good = asgi(ar, limits=SlidingCounter(10, 60, precision=10))
    assert [m["type"] for m in await lifespan_startup(good)] == ["lifespan.startup.complete"]
    bad = asgi(ar, limits=SlidingCounter(10, 60, precision=1001), scope="bad")
    with pytest.raises(InvalidArgumentError, match="PRECISION"):
        await lifespan_startup(bad)
    # Redis down at startup: logged, and the app starts (fail open stays possible).
    down = asgi(redis.asyncio.Redis(port=free_port()), limits=TokenBucket(5, 1))
    assert [m["type"] for m in await lifespan_startup(down)] == ["lifespan.startup.complete"]
