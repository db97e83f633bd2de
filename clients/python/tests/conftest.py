"""Fixtures: one redis-server with the module for the whole run (emptied
before each test), a cluster started only if a cluster test runs, and a
port nothing listens on for the fail-open/fail-closed tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from redis_ratelimit import AsyncRateLimiter, RateLimiter

from .servers import Cluster, Server, free_port


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    yield c
    c.stop()


@pytest.fixture
def r(server: Server) -> Iterator[redis.Redis]:
    client = redis.Redis(port=server.port)
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def limiter(r: redis.Redis) -> RateLimiter:
    return RateLimiter(r)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def ar(server: Server) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis(port=server.port)
    await client.flushall()
    yield client
    await client.aclose()


@pytest.fixture
def alimiter(ar: redis.asyncio.Redis) -> AsyncRateLimiter:
    return AsyncRateLimiter(ar)


@pytest.fixture
def down() -> tuple[redis.Redis, redis.asyncio.Redis]:
    """Clients of a Redis that is down: a loopback port nothing listens on
    (connections are refused at once), without redis-py's retries, whose
    backoff would only make the tests wait."""
    port = free_port()
    return (
        redis.Redis(port=port, retry=Retry(NoBackoff(), 0)),
        redis.asyncio.Redis(port=port, retry=AsyncRetry(NoBackoff(), 0)),
    )
