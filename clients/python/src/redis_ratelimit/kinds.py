"""Which redis-py client is which: a sync one where an asyncio one is
needed (or the other way round) is refused when the object is built, with a
TypeError that names the fix, rather than failing on the first command with
``object list can't be used in 'await' expression``."""

from __future__ import annotations

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

SYNC = (redis.Redis, RedisCluster)
ASYNC = (redis.asyncio.Redis, AsyncRedisCluster)


def require_sync(client: object, who: str, instead: str) -> None:
    """Raises TypeError unless `client` is a sync redis-py client."""
    if isinstance(client, SYNC):
        return
    if isinstance(client, ASYNC):
        raise TypeError(
            f"{who} needs a sync Redis client (redis.Redis or redis.cluster.RedisCluster), "
            f"but got the asyncio {type(client).__module__}.{type(client).__name__}: "
            f"give it redis.Redis(...), or use {instead} with this client"
        )
    raise TypeError(
        f"{who} needs a redis-py client (redis.Redis or redis.cluster.RedisCluster), "
        f"not {type(client).__name__}"
    )


def require_async(client: object, who: str, instead: str) -> None:
    """Raises TypeError unless `client` is an asyncio redis-py client."""
    if isinstance(client, ASYNC):
        return
    if isinstance(client, SYNC):
        raise TypeError(
            f"{who} needs an asyncio Redis client (redis.asyncio.Redis or "
            f"redis.asyncio.cluster.RedisCluster), but got the sync "
            f"{type(client).__module__}.{type(client).__name__}: give it "
            f"redis.asyncio.Redis(...), or use {instead} with this client"
        )
    raise TypeError(
        f"{who} needs a redis-py asyncio client (redis.asyncio.Redis or "
        f"redis.asyncio.cluster.RedisCluster), not {type(client).__name__}"
    )
