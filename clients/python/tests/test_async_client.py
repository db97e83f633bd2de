"""The asyncio client: the same calls as the sync one, awaited."""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from datetime import timedelta

import pytest
import redis.asyncio

from redis_ratelimit import (
    AsyncRateLimiter,
    FixedWindow,
    RateLimiter,
    RateLimitExceeded,
    SlidingLog,
    TokenBucket,
    TopEntry,
    WrongTypeError,
)

from .servers import Server

pytestmark = pytest.mark.anyio


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(cls).items()
        if callable(member) and not name.startswith("_")
    }


async def test_the_asyncio_client_has_every_method_of_the_sync_one_with_the_same_parameters() -> (
    None
):
    sync, aio = public_methods(RateLimiter), public_methods(AsyncRateLimiter)
    assert sync.keys() == aio.keys()
    for name, signature in sync.items():
        assert list(signature.parameters.values()) == list(aio[name].parameters.values()), name


async def test_every_algorithm_answers_through_the_asyncio_client(
    alimiter: AsyncRateLimiter,
) -> None:
    answers = [
        await alimiter.token_bucket("a", 2, 1),
        await alimiter.sliding_counter("b", 2, "1m", precision=2),
        await alimiter.fixed_window("c", 2, "1m"),
        await alimiter.sliding_log("d", 2, "1m"),
        await alimiter.leaky_bucket("e", 2, 1),
        await alimiter.gcra("f", 1, 1, 1),
        await alimiter.cl_throttle("g", 1, 1, 1),
    ]
    assert [(d.allowed, d.limit, d.remaining) for d in answers] == [(True, 2, 1)] * 7


async def test_check_all_and_peek_through_the_asyncio_client(alimiter: AsyncRateLimiter) -> None:
    tiers = [("{u}:a", TokenBucket(1, 0.01)), ("{u}:b", SlidingLog(5, "1m"))]
    peeked = await alimiter.check_all(tiers, peek=True)
    assert peeked.allowed and await alimiter.info("{u}:a") is None
    assert (await alimiter.check_all(tiers)).allowed
    denied = await alimiter.check_all(tiers, cost=1)
    assert not denied.allowed and [t.remaining for t in denied.tiers] == [0, 4]


async def test_hold_as_an_async_context_manager(alimiter: AsyncRateLimiter) -> None:
    async with alimiter.hold("k", 1, "10s") as lease:
        assert lease.allowed
        with pytest.raises(RateLimitExceeded):
            async with alimiter.hold("k", 1, "10s"):
                pytest.fail("the block ran without a slot")
    assert (await alimiter.acquire("k", 1, "10s")).allowed


async def test_acquire_release_and_info_through_the_asyncio_client(
    alimiter: AsyncRateLimiter,
) -> None:
    lease = await alimiter.acquire("k", 2, "1m", lease_id="job")
    assert lease.id == "job"
    info = await alimiter.info("k")
    assert info is not None and info.algorithm == "concurrency" and info.ttl > timedelta(seconds=59)
    assert await alimiter.release("k", "job") is True


async def test_an_error_reply_raises_the_same_named_exception(alimiter: AsyncRateLimiter) -> None:
    await alimiter.token_bucket("k", 1, 1)
    with pytest.raises(WrongTypeError, match=r"RL\.SLIDINGLOG: WRONGTYPE"):
        await alimiter.sliding_log("k", 1, 1)


async def test_shadow_penalty_and_peek_through_the_asyncio_client(
    alimiter: AsyncRateLimiter,
) -> None:
    one = FixedWindow(1, "1h")
    assert (await alimiter.check("k", one)).allowed
    assert (await alimiter.check("k", one, shadow=True)).shadow_denied
    assert not (await alimiter.check("k", one, penalty="1m")).allowed
    info = await alimiter.info("k")
    assert info is not None and info.penalty_until is not None
    peeked = await alimiter.peek("other", one, cost=1)
    assert peeked.allowed and await alimiter.info("other") is None


async def test_a_blocked_acquire_waits_for_a_release_through_the_asyncio_client(
    server: Server, ar: redis.asyncio.Redis
) -> None:
    waiting = AsyncRateLimiter(redis.asyncio.Redis(port=server.port, socket_timeout=None))
    other = AsyncRateLimiter(redis.asyncio.Redis(port=server.port))
    held = await other.acquire("k", 1, "30s")
    assert held.id is not None

    async def release_soon(lease_id: str) -> None:
        await asyncio.sleep(0.15)
        await other.release("k", lease_id)

    releasing = asyncio.create_task(release_soon(held.id))
    start = time.monotonic()
    lease = await waiting.acquire("k", 1, "30s", block=math.inf)
    await releasing
    assert lease.allowed and time.monotonic() - start > 0.1
    refill = TokenBucket(1, 5)
    await other.check("t", refill)
    assert (await other.check("t", refill, block="2s")).allowed
    with pytest.raises(ValueError, match="socket_timeout"):
        await other.check("t", refill, block="10s")  # the default 5 s timeout is shorter
    await waiting.redis.aclose()
    await other.redis.aclose()


async def test_top_through_the_asyncio_client(alimiter: AsyncRateLimiter) -> None:
    await alimiter.top_reset()
    for _ in range(3):
        await alimiter.fixed_window("k", 1, "1h")
    assert await alimiter.top(with_error=True) == [TopEntry("k", 2, 0)]
    await alimiter.top_reset()
    assert await alimiter.top() == []
