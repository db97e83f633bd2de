"""Through RedisCluster, sync and asyncio: each command reaches the node
that owns its key (a wrong node would answer MOVED, which redis-py follows
only for keys it can find), and RL.ALL needs one slot."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from redis_ratelimit import AsyncRateLimiter, RateLimiter, SlidingCounter, TokenBucket

from .servers import Cluster

KEYS = [f"user:{i}" for i in range(12)]


@pytest.fixture
def rc(cluster: Cluster) -> Iterator[RedisCluster]:
    client = RedisCluster(host="127.0.0.1", port=cluster.port)
    client.flushall()
    yield client
    client.close()


@pytest.fixture
async def arc(cluster: Cluster) -> AsyncIterator[AsyncRedisCluster]:
    client = AsyncRedisCluster(host="127.0.0.1", port=cluster.port)
    await client.flushall()
    yield client
    await client.aclose()


def test_keys_in_every_slot_are_checked_on_the_node_that_owns_them(rc: RedisCluster) -> None:
    limiter = RateLimiter(rc)
    owners = {rc.get_node_from_key(key).port for key in KEYS}  # type: ignore[no-untyped-call]
    assert len(owners) == 3  # the keys are spread: routing is really tested
    for key in KEYS:
        assert limiter.token_bucket(key, 2, 1).remaining == 1
        assert limiter.token_bucket(key, 2, 1).remaining == 0
        owner = rc.get_node_from_key(key)  # type: ignore[no-untyped-call]
        assert redis.Redis(host=owner.host, port=owner.port).exists(key) == 1


def test_check_all_with_a_common_hash_tag_runs_on_one_node(rc: RedisCluster) -> None:
    limiter = RateLimiter(rc)
    tiers = [("{user:42}:s", TokenBucket(2, 1)), ("{user:42}:m", SlidingCounter(10, "1m"))]
    assert limiter.check_all(tiers).allowed
    info = limiter.info("{user:42}:m")
    assert info is not None and info.remaining == 9


def test_check_all_across_slots_is_refused_before_it_is_sent(rc: RedisCluster) -> None:
    with pytest.raises(RedisClusterException, match="same key slot"):
        RateLimiter(rc).check_all([("user:1", TokenBucket(1, 1)), ("user:2", TokenBucket(1, 1))])


def test_leases_through_the_cluster(rc: RedisCluster) -> None:
    limiter = RateLimiter(rc)
    with limiter.hold("uploads:7", 1, "10s"):
        assert not limiter.acquire("uploads:7", 1, "10s").allowed
    assert limiter.info("uploads:7") is None


@pytest.mark.anyio
async def test_the_asyncio_cluster_client_routes_every_command(arc: AsyncRedisCluster) -> None:
    limiter = AsyncRateLimiter(arc)
    for key in KEYS:
        assert (await limiter.gcra(key, 0, 1, "1m")).allowed
        assert not (await limiter.gcra(key, 0, 1, "1m")).allowed
    tiers = {"{t}:a": TokenBucket(1, 1), "{t}:b": TokenBucket(5, 1)}
    assert (await limiter.check_all(tiers)).allowed
    async with limiter.hold("{t}:lease", 1, "5s") as lease:
        assert lease.id is not None
    with pytest.raises(RedisClusterException, match="same key slot"):
        await limiter.check_all({"a": TokenBucket(1, 1), "b": TokenBucket(1, 1)})


def test_peek_and_block_route_by_key(rc: RedisCluster) -> None:
    limiter = RateLimiter(rc)
    refill = TokenBucket(1, 20)  # a token every 50 ms
    for key in KEYS:
        assert limiter.peek(key, refill).remaining == 1
        assert limiter.check(key, refill).allowed
        assert limiter.peek(key, refill).remaining == 0
    owners = {rc.get_node_from_key(key).port: key for key in KEYS}  # type: ignore[no-untyped-call]
    for key in owners.values():  # one key per node
        assert limiter.check(key, refill, block="2s").allowed
