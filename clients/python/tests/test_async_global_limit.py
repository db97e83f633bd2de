"""`AsyncGlobalLimit`: the leased global limit on an asyncio client. Its
`allow` decides without suspending while quota is held, an asyncio task
keeps quota ahead of demand, `aclose` gives back what was not spent, and a
Redis that stops answers with the fail mode."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Coroutine
from typing import Any

import pytest
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from redis_ratelimit import AsyncGlobalLimit, AsyncRateLimiter, TokenBucket

from .servers import Server

pytestmark = pytest.mark.anyio


def at_once(coro: Coroutine[Any, Any, bool]) -> bool:
    """The coroutine's result if it finishes without suspending; fails the
    test if it would wait on anything."""
    try:
        coro.send(None)
    except StopIteration as done:
        result: bool = done.value
        return result
    coro.close()
    raise AssertionError("allow() suspended")


async def test_allow_does_not_suspend_while_quota_is_held(ar: redis.asyncio.Redis) -> None:
    async with AsyncGlobalLimit(ar, "ag:fast", TokenBucket(1_000_000, 1_000_000)) as gl:
        # Until its task has seen demand, a request with nothing held asks
        # Redis itself (awaits); then none does.
        for _ in range(100):
            assert await gl.allow()
            await asyncio.sleep(0.001)
        for _ in range(500):
            assert at_once(gl.allow())
            await asyncio.sleep(0.001)  # the refill task runs between requests
        stats = gl.stats()
    assert stats.spent == 600
    assert stats.calls < 600 // 10, stats  # batches, not one call per request


async def test_a_denial_does_not_suspend_either(ar: redis.asyncio.Redis) -> None:
    async with AsyncGlobalLimit(ar, "ag:deny", TokenBucket(20, 0.001)) as gl:
        answers = []
        for _ in range(20):
            answers.append(await gl.allow())
            await asyncio.sleep(0.002)
        for _ in range(30):
            answers.append(at_once(gl.allow()))
            await asyncio.sleep(0.002)
        stats = gl.stats()
    assert answers.count(True) == 20 and answers[-1] is False
    assert stats.denied > 0


async def test_batches_follow_demand(ar: redis.asyncio.Redis) -> None:
    async with AsyncGlobalLimit(ar, "ag:tb", TokenBucket(1_000_000, 1_000_000)) as gl:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.5:  # ~200 a second
            await gl.allow()
            await asyncio.sleep(0.005)
        slow = gl.stats()
        t1 = time.monotonic()
        while time.monotonic() - t1 < 0.5:  # as fast as it goes, letting the task run
            for _ in range(100):
                await gl.allow()
            await asyncio.sleep(0)
        fast = gl.stats()
    slow_batch = slow.granted / slow.calls
    fast_batch = (fast.granted - slow.granted) / (fast.calls - slow.calls)
    assert fast_batch > 5 * slow_batch, (slow, fast)
    assert fast.denied == 0


async def test_unspent_quota_comes_back_on_aclose(
    ar: redis.asyncio.Redis, alimiter: AsyncRateLimiter
) -> None:
    bucket = TokenBucket(10_000, 0.001)
    gl = AsyncGlobalLimit(ar, "ag:close", bucket, max_lease=5.0, idle=5.0)
    for _ in range(300):
        assert await gl.allow()
        await asyncio.sleep(0.001)
    held = gl.stats()
    assert held.granted > held.spent
    await gl.aclose()
    after = gl.stats()
    assert after.held == 0
    assert after.refunded == after.granted - after.spent
    assert (await alimiter.peek("ag:close", bucket)).remaining == 10_000 - after.spent


async def test_unspent_quota_comes_back_when_the_lease_ends(ar: redis.asyncio.Redis) -> None:
    async with AsyncGlobalLimit(
        ar, "ag:lease", TokenBucket(10_000, 0.001), max_lease=0.3, idle=10.0
    ) as gl:
        for _ in range(200):
            await gl.allow()
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.6)
        stats = gl.stats()
        assert stats.held == 0
        assert stats.refunded == stats.granted - stats.spent > 0


async def _fill_then_stop(fail_open: bool) -> tuple[list[bool], AsyncGlobalLimit, int]:
    server = Server()
    try:
        client = redis.asyncio.Redis(port=server.port, retry=Retry(NoBackoff(), 0))
        gl = AsyncGlobalLimit(
            client, "ag:down", TokenBucket(100_000, 100_000), fail_open=fail_open, idle=5.0
        )
        for _ in range(300):
            assert await gl.allow()
            await asyncio.sleep(0.001)
        held = gl.stats().held
    finally:
        server.stop()
    answers = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.3:
        answers.append(await gl.allow())
        await asyncio.sleep(0.001)
    return answers, gl, held


async def test_redis_stopped_spends_what_is_held_then_fails_closed() -> None:
    answers, gl, held = await _fill_then_stop(fail_open=False)
    stats = gl.stats()
    n = min(held, len(answers))
    assert answers[:n] == [True] * n
    assert answers[-1] is False
    assert stats.failed_closed > 0 and stats.failed_open == 0
    await gl.aclose()
    s = gl.stats()
    assert s.refunds_lost == s.granted - s.spent - s.refunded


async def test_redis_stopped_fails_open() -> None:
    answers, gl, _ = await _fill_then_stop(fail_open=True)
    await gl.aclose()
    assert all(answers)
    assert gl.stats().failed_open > 0


async def test_redis_hung_never_holds_a_request_and_recovers() -> None:
    server = Server()
    try:
        client = redis.asyncio.Redis(port=server.port, retry=Retry(NoBackoff(), 0))
        gl = AsyncGlobalLimit(
            client,
            "ag:hung",
            TokenBucket(100_000, 100_000),
            fail_open=False,
            timeout=0.05,
            cooldown=0.2,
            idle=5.0,
        )
        for _ in range(200):
            assert await gl.allow()
            await asyncio.sleep(0.001)
        server.process.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.4:
            at_once(gl.allow())  # never waits on Redis
            await asyncio.sleep(0.001)
        hung = gl.stats()
        assert hung.failed_closed > 0
        server.process.send_signal(signal.SIGCONT)
        t1 = time.monotonic()
        while time.monotonic() - t1 < 0.6:
            await gl.allow()
            await asyncio.sleep(0.001)
        back = gl.stats()
        assert back.granted > hung.granted  # leasing resumed
        assert back.spent > hung.spent
        await gl.aclose()
    finally:
        server.process.send_signal(signal.SIGCONT)
        server.stop()


def test_a_sync_client_is_refused(r: object) -> None:
    with pytest.raises(TypeError, match="asyncio"):
        AsyncGlobalLimit(r, "ag:x", TokenBucket(1, 1))  # type: ignore[arg-type]
