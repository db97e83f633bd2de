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

from redis_ratelimit import AsyncRateLimiter, FixedWindow, RateLimiter, SlidingCounter, TokenBucket

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


def deny_each(limiter: RateLimiter, denials: dict[str, int]) -> None:
    for key, n in denials.items():
        for _ in range(n + 1):
            limiter.fixed_window(key, 1, "1h")


def test_top_merges_every_primarys_list_and_reset_clears_them_all(rc: RedisCluster) -> None:
    limiter = RateLimiter(rc)
    limiter.top_reset()
    denials = {key: i % 4 + 1 for i, key in enumerate(KEYS)}  # keys on all three nodes
    deny_each(limiter, denials)
    expected = sorted(denials.items(), key=lambda kv: (-kv[1], kv[0].encode()))
    assert [(e.key, e.count) for e in limiter.top(len(KEYS))] == expected
    assert [(e.key, e.count, e.error) for e in limiter.top(3, with_error=True)] == [
        (key, n, 0) for key, n in expected[:3]
    ]
    for node in rc.get_primaries():  # type: ignore[no-untyped-call]
        # Each node counts only the keys it serves.
        alone = RateLimiter(redis.Redis(host=node.host, port=node.port)).top(100)
        owned = [k for k in KEYS if rc.get_node_from_key(k).port == node.port]  # type: ignore[no-untyped-call]
        assert sorted(e.key for e in alone) == sorted(owned)
    limiter.top_reset()
    assert limiter.top() == []


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


@pytest.mark.anyio
async def test_top_through_the_asyncio_cluster_client(arc: AsyncRedisCluster) -> None:
    limiter = AsyncRateLimiter(arc)
    await limiter.top_reset()
    for key in KEYS:
        await limiter.fixed_window(key, 1, "1h")
        await limiter.fixed_window(key, 1, "1h")
    top = await limiter.top(100)
    assert sorted(e.key for e in top) == sorted(KEYS) and {e.count for e in top} == {1}
    assert not (await limiter.peek(KEYS[0], FixedWindow(1, "1h"))).allowed
    await limiter.top_reset()
    assert await limiter.top() == []


def test_a_block_longer_than_the_sync_cluster_clients_default_timeout_is_refused(
    rc: RedisCluster,
) -> None:
    # No socket_timeout given: the nodes' connections have redis-py's 5 s,
    # which the cluster client's own kwargs do not show (issue 21, item 7).
    limiter = RateLimiter(rc)
    with pytest.raises(ValueError, match="socket_timeout is 5 s"):
        limiter.check("user:1", TokenBucket(1, 0.1), block="8s")
    assert rc.dbsize() == 0  # refused before it was sent
