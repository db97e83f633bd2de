"""How the middleware asks Redis without ever waiting long for it: a
circuit breaker per Redis client, and a short time budget per call.

redis-py's defaults are made for callers who would rather wait than fail
(retries with backoff, a socket timeout of none or seconds); a rate limiter
in front of every request is the opposite case. So the middleware never
sends through the app's client as configured: it sends through a twin of
it (same server, same credentials, its own pool) whose connections time out
after `timeout` seconds and never retry, and it bounds each call by that
same budget whatever happens inside redis-py. After a failure, the Redis
client's breaker opens: for `cooldown` seconds no request asks Redis (each
is answered as the rule's ``fail_open`` says, in microseconds); then one
request probes, and its success closes the breaker.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from typing import Any, TypeVar

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import (
    AskError,
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    AuthorizationError,
    ClusterError,
    NoPermissionError,
    ReadOnlyError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ..async_client import AsyncRateLimiter
from ..client import RateLimiter
from ..commands import Command

T = TypeVar("T")

#: Replies that mean the servers are changing hands, not that they refused
#: the command: a slot being migrated (``TRYAGAIN``), redirections that do
#: not settle (``MOVED``/``ASK`` loops, which redis-py ends with
#: ``ClusterError: TTL exhausted``), a cluster without a primary for the
#: slot (``CLUSTERDOWN``, ``MASTERDOWN``; `ClusterError` covers them), a
#: slot no node serves, a primary turned replica (``READONLY``). An outage
#: while they last: the breaker counts them and the fail mode answers.
IN_TRANSITION = (TryAgainError, ClusterError, AskError, SlotNotCoveredError, ReadOnlyError)

#: Redis refused the credentials or rights (NOAUTH, WRONGPASS, NOPERM; some
#: are ConnectionErrors in redis-py): never counted by the breaker, which
#: would then answer for Redis as if it were down. `web.core` raises them.
REFUSED = (
    AuthenticationError,
    AuthorizationError,
    AuthenticationWrongNumberOfArgsError,
    NoPermissionError,
)

#: Redis's answer within this many seconds, or the call counts as failed.
DEFAULT_TIMEOUT = 0.1
#: How long requests skip Redis after a failure before one probes it.
DEFAULT_COOLDOWN = 1.0

# Connection settings of the app's client that belong to its own pool, not
# to a twin (redis-py's bookkeeping of the original connection).
_NOT_COPIED = ("retry", "orig_", "maint_notifications", "himport_registry", "driver_info")


class CircuitOpenError(RedisConnectionError):
    """Redis was not asked: it failed a moment ago and the breaker is open."""


class Breaker:
    """Closed (ask Redis), open (do not, until the cool-down ends), then
    half-open (one request probes; the others still skip). Thread-safe;
    asyncio needs no more (nothing here awaits)."""

    def __init__(self, cooldown: float = DEFAULT_COOLDOWN) -> None:
        self.cooldown = cooldown
        self._lock = threading.Lock()
        self._open_until: float | None = None
        self._probing = False

    @property
    def closed(self) -> bool:
        return self._open_until is None

    def admit(self) -> None:
        """Returns when Redis may be asked; raises `CircuitOpenError` when not."""
        with self._lock:
            if self._open_until is None:
                return
            if time.monotonic() < self._open_until or self._probing:
                raise CircuitOpenError(
                    "Redis failed recently; not asking it until the cool-down ends"
                )
            self._probing = True

    def succeeded(self) -> None:
        with self._lock:
            self._open_until = None
            self._probing = False

    def failed(self) -> None:
        with self._lock:
            self._open_until = time.monotonic() + self.cooldown
            self._probing = False

    def abandoned(self) -> None:
        """The call ended without a word from Redis either way (cancelled):
        another request may probe."""
        with self._lock:
            self._probing = False


def _twin_kwargs(pool: Any, timeout: float) -> dict[str, Any]:
    kwargs = {
        k: v
        for k, v in pool.connection_kwargs.items()
        if not any(k.startswith(p) for p in _NOT_COPIED)
    }
    kwargs["socket_timeout"] = timeout
    kwargs["socket_connect_timeout"] = timeout
    return kwargs


class SyncGuard:
    """The breaker and the budget for one sync Redis client."""

    def __init__(self, client: redis.Redis | RedisCluster, timeout: float, cooldown: float) -> None:
        self.timeout = timeout
        self.breaker = Breaker(cooldown)
        if isinstance(client, RedisCluster):
            # A cluster client routes by slot through its own node pools: it
            # is used as given (set its socket_timeout short), behind the breaker.
            self.limiter = RateLimiter(client)
        else:
            pool = client.connection_pool
            twin = redis.ConnectionPool(
                connection_class=pool.connection_class,
                retry=Retry(NoBackoff(), 0),
                **_twin_kwargs(pool, timeout),
            )
            self.limiter = RateLimiter(redis.Redis(connection_pool=twin))

    def run(self, command: Command[T]) -> T:
        self.breaker.admit()
        try:
            reply = self.limiter.run(command)
        except REFUSED:
            self.breaker.succeeded()  # Redis answered: a wrong password is not an outage
            raise
        except (RedisConnectionError, RedisTimeoutError, *IN_TRANSITION):
            self.breaker.failed()
            raise
        except Exception:
            self.breaker.succeeded()  # an error reply: Redis answered
            raise
        except BaseException:
            self.breaker.abandoned()
            raise
        self.breaker.succeeded()
        return reply


class AsyncGuard:
    """The breaker and the budget for one asyncio Redis client."""

    def __init__(
        self,
        client: redis.asyncio.Redis | AsyncRedisCluster,
        timeout: float,
        cooldown: float,
    ) -> None:
        self.timeout = timeout
        self.breaker = Breaker(cooldown)
        self.client = client
        self.limiter = self._twin()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _twin(self) -> AsyncRateLimiter:
        client = self.client
        if isinstance(client, AsyncRedisCluster):
            return AsyncRateLimiter(client)
        pool = client.connection_pool
        twin = redis.asyncio.ConnectionPool(
            connection_class=pool.connection_class,
            retry=AsyncRetry(NoBackoff(), 0),
            **_twin_kwargs(pool, self.timeout),
        )
        return AsyncRateLimiter(redis.asyncio.Redis(connection_pool=twin))

    def on_this_loop(self) -> AsyncRateLimiter:
        """The twin client, made again when the running loop is new:
        asyncio connections belong to the loop that made them, and a new
        loop (Starlette's TestClient without `with` makes one per request;
        an app built again in a test, with its own) needs a pool of its own."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if self._loop is not None:
                self.limiter = self._twin()
            self._loop = loop
        return self.limiter

    async def run(self, command: Command[T]) -> T:
        self.on_this_loop()
        self.breaker.admit()
        try:
            # The budget bounds the whole call, retries and all.
            reply = await asyncio.wait_for(self.limiter.run(command), self.timeout)
        except REFUSED:
            self.breaker.succeeded()  # Redis answered: a wrong password is not an outage
            raise
        except (RedisConnectionError, RedisTimeoutError, *IN_TRANSITION):
            self.breaker.failed()
            raise
        except asyncio.TimeoutError as error:
            self.breaker.failed()
            raise RedisTimeoutError(f"no answer from Redis within {self.timeout:g} s") from error
        except Exception:
            self.breaker.succeeded()  # an error reply: Redis answered
            raise
        except BaseException:
            self.breaker.abandoned()  # cancelled
            raise
        self.breaker.succeeded()
        return reply


_lock = threading.Lock()
_sync_guards: weakref.WeakKeyDictionary[Any, SyncGuard] = weakref.WeakKeyDictionary()
_async_guards: weakref.WeakKeyDictionary[Any, AsyncGuard] = weakref.WeakKeyDictionary()


def sync_guard(
    client: redis.Redis | RedisCluster,
    timeout: float = DEFAULT_TIMEOUT,
    cooldown: float = DEFAULT_COOLDOWN,
) -> SyncGuard:
    """The guard of `client`, one per client (made by its first rule, with
    that rule's `timeout` and `cooldown`)."""
    with _lock:
        guard = _sync_guards.get(client)
        if guard is None:
            guard = _sync_guards[client] = SyncGuard(client, timeout, cooldown)
        return guard


def async_guard(
    client: redis.asyncio.Redis | AsyncRedisCluster,
    timeout: float = DEFAULT_TIMEOUT,
    cooldown: float = DEFAULT_COOLDOWN,
) -> AsyncGuard:
    """The guard of `client`, one per client (see `sync_guard`)."""
    with _lock:
        guard = _async_guards.get(client)
        if guard is None:
            guard = _async_guards[client] = AsyncGuard(client, timeout, cooldown)
        return guard
