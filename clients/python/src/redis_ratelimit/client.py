"""The sync client: one method per command, over ``redis.Redis`` or
``redis.cluster.RedisCluster``.

Each method builds its command and reads the reply with `commands`; this
class only sends it. The asyncio client, `async_client`, is generated from
this file, and the methods per algorithm in this file from `limits`
(``python tools/unasync.py``; a test checks both are up to date), so a
method written here once is in both, and an algorithm is its class.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar, cast

from redis.cluster import RedisCluster
from redis.exceptions import ResponseError
from typing_extensions import Unpack

from . import commands, limits, policies
from .cache import DenialCache
from .commands import CheckOptions, Command, Key, Tiers
from .decision import Decision, Lease
from .errors import RateLimitExceeded, translate
from .info import KeyInfo
from .kinds import require_sync
from .limits import Limit
from .policies import NamedPolicy, PolicyBook, PolicyInfo
from .top import TopEntry
from .units import Duration, Rate

if TYPE_CHECKING:
    from redis import Redis

T = TypeVar("T")


class RateLimiter:
    """Rate-limit commands over a redis-py sync client: ``redis.Redis`` or
    ``redis.cluster.RedisCluster``.

    Keys are routed by the client as any other command's (every command
    declares its keys); ``check_all`` needs its keys in one cluster slot, so
    give them a common hash tag (``{user:42}:s``, ``{user:42}:m``).
    """

    def __init__(self, redis: Redis | RedisCluster, *, denial_cache: bool = False) -> None:
        require_sync(redis, type(self).__name__, "AsyncRateLimiter")
        self.redis = redis
        #: With ``denial_cache=True``, a check denied with a wait is denied
        #: again locally, without a round trip, until that wait has passed
        #: (the same command: key, limit, options); off by default.
        self.denials = DenialCache() if denial_cache else None
        #: The definitions of the named policies checked through this
        #: client, read for the headers (`policies.PolicyBook`).
        self.policies = PolicyBook()

    def run(self, command: Command[T]) -> T:
        """Sends `command`; an error reply raises the matching exception
        of `redis_ratelimit.errors`."""
        commands.check_block(command, self._socket_timeout())
        if self.denials is not None and command.cacheable:
            cached = self.denials.get(command.words)
            if cached is not None:
                return cast(T, cached)
        route: dict[str, object] = {}
        if command.every_primary and isinstance(self.redis, RedisCluster):
            route = {"target_nodes": self.redis.get_primaries()}  # type: ignore[no-untyped-call]
        elif command.any_node and isinstance(self.redis, RedisCluster):
            route = {"target_nodes": self.redis.get_default_node()}  # type: ignore[no-untyped-call]
        try:
            # redis-py leaves the sync execute_command unannotated.
            reply = self.redis.execute_command(*command.words, **route)  # type: ignore[no-untyped-call]
        except ResponseError as error:
            raise translate(error, command.name) from error
        result = command.parse(reply)
        denied = isinstance(result, Decision) and not result.allowed
        if self.denials is not None and command.cacheable and denied:
            self.denials.put(command.words, cast(Decision, result))
        return result

    def _socket_timeout(self) -> float | None:
        """The connections' ``socket_timeout`` in seconds (None: none)."""
        kwargs = self.redis.get_connection_kwargs()
        # sync only: begin
        if isinstance(self.redis, RedisCluster) and "socket_timeout" not in kwargs:
            # The sync cluster client's kwargs hold only what was given: the
            # nodes' connections have redis-py's default, which is the one
            # a block must outlast.
            node = self.redis.get_default_node()  # type: ignore[no-untyped-call]
            if node is not None and node.redis_connection is not None:
                kwargs = node.redis_connection.connection_pool.connection_kwargs
        # sync only: end
        timeout = kwargs.get("socket_timeout")
        return None if timeout is None else float(timeout)

    def check(
        self, key: Key, limit: Limit | NamedPolicy, **options: Unpack[CheckOptions]
    ) -> Decision:
        """Checks `key` against `limit` (any algorithm), or against a named
        policy (``RL.CHECK``; a policy of several tiers checks one key per
        tier, `policies.policy_keys`). A policy Redis does not hold raises
        `PolicyNotFoundError`."""
        if isinstance(limit, NamedPolicy):
            name = limit.static_name()
            if self.policies.stale(name):
                self.policies.put(name, self.run(policies.get_command(name)))
            return self.run(policies.check_command(key, name, self.policies, **options))
        return self.run(commands.check(key, limit, **options))

    def peek(self, key: Key, limit: Limit | NamedPolicy, *, cost: int = 1) -> Decision:
        """``RL.PEEK``: what checking `key` against `limit` would answer now,
        changing nothing (a read-only command: replicas answer it). For a
        named policy, ``RL.CHECK ... PEEK``."""
        if isinstance(limit, NamedPolicy):
            return self.check(key, limit, cost=cost, peek=True)
        return self.run(commands.peek(key, limit, cost))

    def policy(self, name: str) -> PolicyInfo | None:
        """``RL.POLICY GET``: the policy's version and definition, or None."""
        return self.run(policies.get_command(name))

    # algorithms: begin
    # One method per algorithm of limits.ALGORITHMS, made by tools/unasync.py
    # from each class (its parameters, its docstring): do not edit here.
    def token_bucket(
        self, key: Key, capacity: int, rate: Rate, **options: Unpack[CheckOptions]
    ) -> Decision:
        """``RL.TOKENBUCKET``: starts full with ``capacity`` tokens, refills
        ``rate`` tokens a second; bursts up to ``capacity``."""
        return self.check(key, limits.TokenBucket(capacity, rate), **options)

    def sliding_counter(
        self,
        key: Key,
        limit: int,
        window: Duration,
        precision: int | None = None,
        **options: Unpack[CheckOptions],
    ) -> Decision:
        """``RL.SLIDINGCOUNTER``: about ``limit`` requests in any ``window``,
        estimated from ``precision`` counters (the server's default, 1, when
        None)."""
        return self.check(key, limits.SlidingCounter(limit, window, precision), **options)

    def fixed_window(
        self, key: Key, limit: int, window: Duration, **options: Unpack[CheckOptions]
    ) -> Decision:
        """``RL.FIXEDWINDOW``: ``limit`` requests per ``window``, windows
        aligned to the Unix epoch."""
        return self.check(key, limits.FixedWindow(limit, window), **options)

    def sliding_log(
        self, key: Key, limit: int, window: Duration, **options: Unpack[CheckOptions]
    ) -> Decision:
        """``RL.SLIDINGLOG``: exactly at most ``limit`` requests in any
        ``window``."""
        return self.check(key, limits.SlidingLog(limit, window), **options)

    def leaky_bucket(
        self, key: Key, capacity: int, rate: Rate, **options: Unpack[CheckOptions]
    ) -> Decision:
        """``RL.LEAKYBUCKET``: a queue of ``capacity`` leaving at ``rate`` a
        second; an allowed decision says how long to wait (``delay``)."""
        return self.check(key, limits.LeakyBucket(capacity, rate), **options)

    def gcra(
        self, key: Key, burst: int, count: int, period: Duration, **options: Unpack[CheckOptions]
    ) -> Decision:
        """``RL.GCRA``: ``count`` per ``period``, with bursts of ``burst``
        beyond the steady rate (the limit is ``burst + 1``, redis-cell's
        meaning)."""
        return self.check(key, limits.GCRA(burst, count, period), **options)

    # algorithms: end

    def cl_throttle(
        self, key: Key, max_burst: int, count: int, period: int, quantity: int = 1
    ) -> Decision:
        """``CL.THROTTLE``, for code moving from redis-cell (same key state
        as ``gcra``, which answers in milliseconds)."""
        return self.run(commands.cl_throttle(key, max_burst, count, period, quantity))

    def check_all(
        self,
        tiers: Tiers,
        **options: Unpack[CheckOptions],
    ) -> Decision:
        """``RL.ALL``: every (key, limit) tier at once, taken from all or from
        none; ``decision.tiers`` holds each tier's own answer."""
        return self.run(commands.check_all(tiers, **options))

    def acquire(
        self,
        key: Key,
        limit: int,
        lease: Duration,
        *,
        lease_id: str | None = None,
        block: Duration | None = None,
    ) -> Lease:
        """``RL.ACQUIRE``: one of `limit` slots for at most `lease`; give
        ``lease.id`` to `release`. `block`: wait on the server for a free
        slot, at most that long (``math.inf``: no limit)."""
        return self.run(commands.acquire(key, limit, lease, lease_id, block))

    def release(self, key: Key, lease_id: str) -> bool:
        """``RL.RELEASE``: True if `lease_id` held a live lease."""
        return self.run(commands.release(key, lease_id))

    @contextmanager
    def hold(
        self,
        key: Key,
        limit: int,
        lease: Duration,
        *,
        lease_id: str | None = None,
        block: Duration | None = None,
    ) -> Iterator[Lease]:
        """A slot held while the block runs, released when it ends (a crash
        gives it back when the lease ends). Raises `RateLimitExceeded` when
        no slot is free (after waiting up to `block`, if given), so the
        block never runs without one."""
        taken = self.acquire(key, limit, lease, lease_id=lease_id, block=block)
        if not taken.allowed or taken.id is None:
            raise RateLimitExceeded(taken)
        try:
            yield taken
        finally:
            self.release(key, taken.id)

    def info(self, key: Key) -> KeyInfo | None:
        """``RL.INFO``: what `key` holds, or None when it does not exist."""
        return self.run(commands.info(key))

    def top(self, count: int = 10, *, with_error: bool = False) -> list[TopEntry]:
        """``RL.TOP``: the `count` keys denied most, most first (with each
        count's `error` when asked). Per server: through a cluster client,
        every primary's lists merged (a key's counts added)."""
        return self.run(commands.top(count, with_error))

    def top_reset(self) -> None:
        """``RL.TOP RESET``: forget every count (on every primary)."""
        self.run(commands.top_reset())
