"""The ASGI middleware, driven through httpx's ASGI transport (a real ASGI
client: requests go through the app's whole stack) against the real server."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend, SimpleUser
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from redis_ratelimit import (
    AsyncRateLimiter,
    Decision,
    FixedWindow,
    SlidingCounter,
    TokenBucket,
    WrongTypeError,
)
from redis_ratelimit.web import api_key, forwarded_ip, user
from redis_ratelimit.web.asgi import RateLimitMiddleware

from .servers import Server

pytestmark = pytest.mark.anyio


class Counter:
    """How many requests reached the app."""

    def __init__(self) -> None:
        self.calls = 0

    async def endpoint(self, request: Request) -> PlainTextResponse:
        self.calls += 1
        return PlainTextResponse("hello", headers={"X-App": "yes"})


def app_with(
    redis_client: Any, counter: Counter, *, before: list[Middleware] | None = None, **options: Any
) -> Starlette:
    return Starlette(
        routes=[Route("/hello", counter.endpoint), Route("/health", counter.endpoint)],
        middleware=[
            *(before or []),
            Middleware(RateLimitMiddleware, redis=redis_client, **options),
        ],
    )


def client_for(app: Any, ip: str = "10.0.0.7") -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, client=(ip, 50000)), base_url="http://test"
    )


@pytest.fixture
async def ar_clean(server: Server) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis(port=server.port)
    await client.flushall()
    yield client
    await client.aclose()


async def test_allowed_responses_carry_the_headers_and_a_denial_is_a_429_the_app_never_sees(
    ar_clean: redis.asyncio.Redis,
) -> None:
    counter = Counter()
    app = app_with(ar_clean, counter, limits=TokenBucket(2, 0.5, name="hello"))
    async with client_for(app) as http:
        first, second, third = [await http.get("/hello") for _ in range(3)]
    assert first.status_code == 200 and first.text == "hello" and first.headers["x-app"] == "yes"
    assert first.headers["x-ratelimit-limit"] == "2"
    assert [r.headers["x-ratelimit-remaining"] for r in (first, second)] == ["1", "0"]
    assert first.headers["ratelimit-policy"] == '"hello";q=2;w=4'
    assert first.headers["ratelimit"] == '"hello";r=1;t=2'
    assert "retry-after" not in second.headers
    assert third.status_code == 429
    assert third.headers["retry-after"] == "2"
    assert third.headers["ratelimit"] == '"hello";r=0;t=2'
    assert third.json()["detail"] == "Too many requests: retry in 2 s."
    assert counter.calls == 2


async def test_each_client_address_is_counted_apart_and_x_forwarded_for_is_not_trusted_by_default(
    ar_clean: redis.asyncio.Redis,
) -> None:
    app = app_with(ar_clean, Counter(), limits=FixedWindow(1, "1h"))
    async with client_for(app, "10.0.0.1") as one, client_for(app, "10.0.0.2") as two:
        assert (await one.get("/hello")).status_code == 200
        assert (await two.get("/hello")).status_code == 200
        spoofed = await one.get("/hello", headers={"X-Forwarded-For": "203.0.113.9"})
        assert spoofed.status_code == 429
    assert sorted(await ar_clean.keys()) == [
        b"rl:{ip:10.0.0.1}:fixedwindow",
        b"rl:{ip:10.0.0.2}:fixedwindow",
    ]


async def test_forwarded_ip_takes_the_address_the_trusted_proxy_appended(
    ar_clean: redis.asyncio.Redis,
) -> None:
    app = app_with(
        ar_clean, Counter(), limits=FixedWindow(1, "1h"), key=forwarded_ip(trusted_proxies=1)
    )
    async with client_for(app, "10.0.0.254") as proxy:
        forged_left = {"X-Forwarded-For": "1.1.1.1, 198.51.100.4"}
        assert (await proxy.get("/hello", headers=forged_left)).status_code == 200
        other_forgery = {"X-Forwarded-For": "2.2.2.2, 198.51.100.4"}
        assert (await proxy.get("/hello", headers=other_forgery)).status_code == 429
        assert (
            await proxy.get("/hello", headers={"X-Forwarded-For": "198.51.100.5"})
        ).status_code == 200
    assert b"rl:{ip:198.51.100.4}:fixedwindow" in await ar_clean.keys()


async def test_api_keys_are_counted_apart_and_never_stored_in_clear(
    ar_clean: redis.asyncio.Redis,
) -> None:
    app = app_with(ar_clean, Counter(), limits=FixedWindow(1, "1h"), key=api_key("X-Api-Key"))
    async with client_for(app) as http:
        assert (await http.get("/hello", headers={"X-Api-Key": "secret-a"})).status_code == 200
        assert (await http.get("/hello", headers={"X-Api-Key": "secret-b"})).status_code == 200
        assert (await http.get("/hello", headers={"X-Api-Key": "secret-a"})).status_code == 429
        assert (await http.get("/hello")).status_code == 200  # no key: by address
    keys = await ar_clean.keys()
    assert len(keys) == 3 and b"rl:{ip:10.0.0.7}:fixedwindow" in keys
    assert not any("secret" in str(k) for k in keys)


class HeaderAuth(AuthenticationBackend):
    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser] | None:
        name = conn.headers.get("x-user")
        return (AuthCredentials(["authenticated"]), SimpleUser(name)) if name else None


async def test_the_user_key_follows_starlettes_authenticated_user(
    ar_clean: redis.asyncio.Redis,
) -> None:
    app = app_with(
        ar_clean,
        Counter(),
        limits=FixedWindow(1, "1h"),
        key=user(),
        before=[Middleware(AuthenticationMiddleware, backend=HeaderAuth())],
    )
    async with client_for(app) as http:
        assert (await http.get("/hello", headers={"X-User": "alice"})).status_code == 200
        assert (await http.get("/hello", headers={"X-User": "alice"})).status_code == 429
        assert (await http.get("/hello", headers={"X-User": "bob"})).status_code == 200
        assert (await http.get("/hello")).status_code == 200  # anonymous: by address
    assert sorted(await ar_clean.keys()) == [
        b"rl:{ip:10.0.0.7}:fixedwindow",
        b"rl:{user:alice}:fixedwindow",
        b"rl:{user:bob}:fixedwindow",
    ]


async def test_several_limits_are_one_all_or_nothing_check_with_every_tier_in_the_ietf_fields(
    ar_clean: redis.asyncio.Redis,
) -> None:
    limits = [TokenBucket(2, 0.001, name="burst"), SlidingCounter(10, "1m", name="minute")]
    app = app_with(ar_clean, Counter(), limits=limits)
    async with client_for(app) as http:
        responses = [await http.get("/hello") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert responses[0].headers["ratelimit-policy"] == '"burst";q=2;w=2000, "minute";q=10;w=60'
    limits_field = re.fullmatch(
        r'"burst";r=1;t=1000, "minute";r=9;t=(\d+)', responses[0].headers["ratelimit"]
    )
    assert (
        limits_field and 60 < int(limits_field.group(1)) <= 120
    )  # two windows of the sliding counter
    minute = await AsyncRateLimiter(ar_clean).info("rl:{ip:10.0.0.7}:minute")
    assert minute is not None and minute.remaining == 8  # the denied request took nothing


async def test_a_key_function_returning_none_leaves_the_request_alone(
    ar_clean: redis.asyncio.Redis,
) -> None:
    counter = Counter()

    def key(request: Any) -> str | None:
        return None if request.path == "/health" else "ip:" + request.client

    app = app_with(ar_clean, counter, limits=FixedWindow(1, "1h"), key=key)
    async with client_for(app) as http:
        health = [await http.get("/health") for _ in range(3)]
    assert [r.status_code for r in health] == [200, 200, 200]
    assert "x-ratelimit-limit" not in health[0].headers
    assert await ar_clean.keys() == []


async def test_a_cost_function_charges_each_request_its_own_cost(
    ar_clean: redis.asyncio.Redis,
) -> None:
    app = app_with(
        ar_clean,
        Counter(),
        limits=FixedWindow(10, "1h"),
        cost=lambda request: int(request.headers.get("x-items", "1")),
    )
    async with client_for(app) as http:
        assert (await http.get("/hello", headers={"X-Items": "7"})).headers[
            "x-ratelimit-remaining"
        ] == "3"
        too_big = await http.get("/hello", headers={"X-Items": "11"})
    assert too_big.status_code == 429 and "retry-after" not in too_big.headers
    assert "can never pass" in too_big.text


async def test_only_the_chosen_header_sets_are_sent(ar_clean: redis.asyncio.Redis) -> None:
    app = app_with(ar_clean, Counter(), limits=FixedWindow(5, "1h"), legacy_headers=False)
    async with client_for(app) as http:
        response = await http.get("/hello")
    assert "ratelimit" in response.headers and "x-ratelimit-limit" not in response.headers


async def test_unreachable_redis_fails_open_by_default_and_says_so_in_the_log(
    down: tuple[Any, redis.asyncio.Redis], caplog: pytest.LogCaptureFixture
) -> None:
    counter = Counter()
    app = app_with(down[1], counter, limits=FixedWindow(1, "1h"))
    with caplog.at_level(logging.WARNING, logger="redis_ratelimit"):
        async with client_for(app) as http:
            responses = [await http.get("/hello") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 200] and counter.calls == 3
    assert "x-ratelimit-limit" not in responses[0].headers
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1  # not one line per request
    assert "cannot ask Redis" in messages[0] and "let through" in messages[0]


async def test_unreachable_redis_fails_closed_with_a_503_when_asked(
    down: tuple[Any, redis.asyncio.Redis],
) -> None:
    counter = Counter()
    app = app_with(down[1], counter, limits=FixedWindow(1, "1h"), fail_open=False)
    async with client_for(app) as http:
        response = await http.get("/hello")
    assert response.status_code == 503 and counter.calls == 0


async def test_an_error_reply_is_raised_not_taken_for_an_outage(
    ar_clean: redis.asyncio.Redis,
) -> None:
    await ar_clean.set("rl:{ip:10.0.0.7}:fixedwindow", "not a limiter")
    app = app_with(ar_clean, Counter(), limits=FixedWindow(1, "1h"))
    async with client_for(app) as http:
        with pytest.raises(WrongTypeError):
            await http.get("/hello")


async def test_non_http_scopes_pass_straight_through(ar_clean: redis.asyncio.Redis) -> None:
    seen: list[str] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    middleware = RateLimitMiddleware(inner, redis=ar_clean, limits=FixedWindow(1, "1h"))
    await middleware({"type": "lifespan"}, None, None)  # type: ignore[arg-type]
    assert seen == ["lifespan"] and await ar_clean.keys() == []


async def test_a_shadow_rule_never_answers_429_and_tells_the_hook_what_it_would_have_denied(
    ar_clean: redis.asyncio.Redis,
) -> None:
    counter = Counter()
    seen: list[tuple[str, Decision]] = []
    app = app_with(
        ar_clean,
        counter,
        limits=FixedWindow(1, "1h"),
        shadow=True,
        on_shadow_denied=lambda request, decision: seen.append((request.path, decision)),
    )
    async with client_for(app) as http:
        responses = [await http.get("/hello") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 200] and counter.calls == 3
    assert "retry-after" not in responses[2].headers
    assert [(path, d.shadow_denied) for path, d in seen] == [("/hello", True)] * 2
    info = await AsyncRateLimiter(ar_clean).info("rl:{ip:10.0.0.7}:fixedwindow")
    assert info is not None and info.fields["count"] == 1  # the shadow denials took nothing


async def test_a_shadow_denial_is_logged_at_info_without_a_hook(
    ar_clean: redis.asyncio.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    app = app_with(ar_clean, Counter(), limits=FixedWindow(1, "1h"), shadow=True)
    with caplog.at_level(logging.INFO, logger="redis_ratelimit"):
        async with client_for(app) as http:
            await http.get("/hello")
            await http.get("/hello")
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith("shadow rate limit would have denied GET /hello (retry in ")


async def test_a_penalty_keeps_answering_429_after_the_limit_refills(
    ar_clean: redis.asyncio.Redis,
) -> None:
    # A token every 200 ms: room for a loaded machine between the first two.
    app = app_with(ar_clean, Counter(), limits=TokenBucket(1, 5), penalty="1m")
    async with client_for(app) as http:
        assert (await http.get("/hello")).status_code == 200
        denied = await http.get("/hello")
        await asyncio.sleep(0.3)  # the bucket is full again
        still = await http.get("/hello")
    assert denied.status_code == 429 and denied.headers["retry-after"] == "60"
    assert still.status_code == 429
    info = await AsyncRateLimiter(ar_clean).info("rl:{ip:10.0.0.7}:tokenbucket")
    assert info is not None and info.penalty_until is not None
