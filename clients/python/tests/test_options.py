"""The module's newest options and calls through the sync client, against a
real server: SHADOW, PENALTY, BLOCK, RL.PEEK and RL.TOP; and what the
client itself decides about them (BLOCK's spelling, the socket timeout
check, the merge of several servers' RL.TOP)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import pytest
import redis
from redis.exceptions import ReadOnlyError

from redis_ratelimit import (
    GCRA,
    Decision,
    FixedWindow,
    InvalidArgumentError,
    LeakyBucket,
    Limit,
    RateLimiter,
    RateLimitExceeded,
    SlidingCounter,
    SlidingLog,
    TokenBucket,
    TopEntry,
)
from redis_ratelimit.commands import Command, check_block
from redis_ratelimit.top import merge_top
from redis_ratelimit.units import block_ms

from .servers import Server, wait_for

#: One of each algorithm, allowing 1 and slow to refill: the second check
#: of a key is denied.
ONE_EACH: list[Limit] = [
    TokenBucket(1, 0.01),
    SlidingCounter(1, "1m"),
    FixedWindow(1, "1h"),
    SlidingLog(1, "1m"),
    LeakyBucket(1, 0.01),
    GCRA(0, 1, "1m"),
]
IDS = [type(limit).__name__ for limit in ONE_EACH]
D = TypeVar("D", bound=Decision)


def elapsed(call: Callable[[], D]) -> tuple[D, float]:
    """What `call` answered, and how many seconds it took."""
    start = time.monotonic()
    decision = call()
    return decision, time.monotonic() - start


# SHADOW


@pytest.mark.parametrize("limit", ONE_EACH, ids=IDS)
def test_a_shadow_check_that_would_deny_is_allowed_with_its_wait_and_takes_nothing(
    limiter: RateLimiter, limit: Limit
) -> None:
    first = limiter.check("k", limit, shadow=True)
    assert first.allowed and not first.shadow_denied
    shadowed = limiter.check("k", limit, shadow=True)
    assert shadowed.allowed and shadowed.shadow_denied
    assert shadowed.retry_after is not None and shadowed.retry_after > timedelta(0)
    assert shadowed.remaining == 0
    # The leaky bucket's would-be denial joined no queue: five elements, no delay.
    assert shadowed.delay == timedelta(0)
    assert "Retry-After" not in shadowed.headers()  # allowed: nothing to retry
    enforced = limiter.check("k", limit)
    assert not enforced.allowed and not enforced.shadow_denied


def test_a_shadow_check_that_could_never_pass_is_a_shadow_denial_too(limiter: RateLimiter) -> None:
    never = limiter.token_bucket("k", 2, 1, cost=3, shadow=True)
    assert never.allowed and never.retry_after is None and never.shadow_denied


def test_check_all_in_shadow_marks_the_combined_answer_and_the_tiers_that_would_deny(
    limiter: RateLimiter,
) -> None:
    tiers = [("{u}:a", TokenBucket(1, 0.01)), ("{u}:b", SlidingLog(5, "1m"))]
    limiter.check_all(tiers)
    shadowed = limiter.check_all(tiers, shadow=True)
    assert shadowed.allowed and shadowed.shadow_denied
    assert [t.shadow_denied for t in shadowed.tiers] == [True, False]
    info = limiter.info("{u}:b")
    assert info is not None and info.remaining == 4  # nothing taken from any tier


# PENALTY


def test_a_penalty_denies_even_after_the_limit_refills(limiter: RateLimiter) -> None:
    fast = TokenBucket(1, 100)  # refills in 10 ms
    assert limiter.check("k", fast, penalty="1m").allowed
    assert limiter.info("k").penalty_until is None  # type: ignore[union-attr]
    denied = limiter.check("k", fast, penalty=timedelta(minutes=1))
    assert not denied.allowed
    assert denied.retry_after is not None
    assert timedelta(seconds=59) < denied.retry_after <= timedelta(minutes=1)
    info = limiter.info("k")
    assert info is not None and info.penalty_until is not None
    assert info.penalty_until.tzinfo == timezone.utc
    until_ms = info.fields["penalty_until_ms"]
    assert isinstance(until_ms, int)
    assert info.penalty_until == datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(
        milliseconds=until_ms
    )
    time.sleep(0.05)  # the bucket is full again; the penalty still holds
    assert not limiter.check("k", fast).allowed


def test_a_penalty_ends_when_it_said(limiter: RateLimiter) -> None:
    fast = TokenBucket(1, 100)
    limiter.check("k", fast)
    assert not limiter.check("k", fast, penalty="200ms").allowed
    wait_for("the penalty to end", 2, lambda: limiter.check("k", fast).allowed)
    info = limiter.info("k")
    assert info is not None and info.penalty_until is not None
    # The allowed request's time, on the server's clock, is past the penalty.
    updated_ms, until_ms = info.fields["updated_ms"], info.fields["penalty_until_ms"]
    assert isinstance(updated_ms, int) and isinstance(until_ms, int)
    assert updated_ms >= until_ms


def test_a_penalty_is_only_on_the_tiers_that_denied(limiter: RateLimiter) -> None:
    tiers = {"{u}:burst": TokenBucket(1, 0.01), "{u}:minute": SlidingLog(10, "1m")}
    limiter.check_all(tiers)
    assert not limiter.check_all(tiers, penalty="10s").allowed
    burst, minute = limiter.info("{u}:burst"), limiter.info("{u}:minute")
    assert burst is not None and minute is not None
    assert burst.penalty_until is not None and minute.penalty_until is None
    now = datetime.now(timezone.utc)
    assert now < burst.penalty_until <= now + timedelta(seconds=11)


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_penalty_until_reads_the_same_under_resp2_and_resp3(server: Server, protocol: int) -> None:
    limiter = RateLimiter(redis.Redis(port=server.port, protocol=protocol))
    limiter.redis.flushall()
    limiter.fixed_window("k", 1, "1h")
    limiter.fixed_window("k", 1, "1h", penalty="1m")
    info = limiter.info("k")
    assert info is not None and isinstance(info.penalty_until, datetime)


def test_shadow_with_a_penalty_starts_none(limiter: RateLimiter) -> None:
    limiter.fixed_window("k", 1, "1h")
    assert limiter.fixed_window("k", 1, "1h", penalty="1m", shadow=True).shadow_denied
    assert limiter.info("k").penalty_until is None  # type: ignore[union-attr]


# BLOCK


def test_a_blocked_check_waits_on_the_server_until_the_limit_refills(
    limiter: RateLimiter,
) -> None:
    refill = TokenBucket(1, 5)  # a token every 200 ms
    start = time.monotonic()
    assert limiter.check("k", refill).allowed
    assert limiter.check("k", refill, block="2s").allowed
    assert 0.19 < time.monotonic() - start < 1.5


def test_a_blocked_check_all_waits_for_every_tier(limiter: RateLimiter) -> None:
    tiers = [("{u}:a", TokenBucket(1, 5)), ("{u}:b", SlidingLog(5, "1m"))]
    start = time.monotonic()
    limiter.check_all(tiers)
    decision = limiter.check_all(tiers, block=timedelta(seconds=2))
    assert decision.allowed and 0.19 < time.monotonic() - start < 1.5
    assert [t.remaining for t in decision.tiers] == [0, 3]


def test_a_blocked_acquire_gets_the_slot_another_client_releases(
    limiter: RateLimiter, server: Server
) -> None:
    other = RateLimiter(redis.Redis(port=server.port))
    held = other.acquire("k", 1, "30s")
    assert held.id is not None
    waiting = RateLimiter(redis.Redis(port=server.port, socket_timeout=None))
    releaser = threading.Timer(0.15, other.release, ("k", held.id))
    start = time.monotonic()
    releaser.start()
    lease = waiting.acquire("k", 1, "30s", block=math.inf)
    releaser.join()
    assert lease.allowed and lease.id is not None and lease.id != held.id
    assert 0.15 <= time.monotonic() - start < 2


def test_a_block_that_times_out_is_a_denial(limiter: RateLimiter) -> None:
    limiter.acquire("k", 1, "30s")
    refused, took = elapsed(lambda: limiter.acquire("k", 1, "30s", block="150ms"))
    assert not refused.allowed and refused.id is None and took >= 0.14
    with pytest.raises(RateLimitExceeded), limiter.hold("k", 1, "30s", block=0.05):
        pytest.fail("the block ran without a slot")


def test_a_block_longer_than_the_sockets_timeout_is_refused_before_it_is_sent(
    server: Server, r: redis.Redis
) -> None:
    limiter = RateLimiter(redis.Redis(port=server.port, socket_timeout=0.5))
    for block in (0.5, "1s", math.inf):
        with pytest.raises(ValueError, match=r"socket_timeout is 0\.5 s"):
            limiter.token_bucket("k", 1, 1, block=block)
    assert r.exists("k") == 0  # nothing was sent
    assert limiter.token_bucket("k", 1, 1, block=0.2).allowed


@pytest.mark.parametrize("block", [0, -1, timedelta(0), "soon", math.nan])
def test_block_must_be_above_zero_or_infinite(limiter: RateLimiter, block: Any) -> None:
    with pytest.raises(ValueError, match=r"math\.inf for no limit"):
        limiter.token_bucket("k", 1, 1, block=block)


@pytest.mark.parametrize(
    ("block", "ms"),
    [
        (math.inf, 0),
        (1, 1000),
        (0.0004, 1),
        (1.0001, 1001),
        ("250ms", 250),
        ("1.5", 1500),
        (timedelta(microseconds=1500), 2),
    ],
)
def test_block_is_sent_as_whole_milliseconds_rounded_up_and_inf_as_no_limit(
    block: Any, ms: int
) -> None:
    assert block_ms(block) == ms


def test_the_socket_timeout_check() -> None:
    def command(block: int | None) -> Command[None]:
        return Command("RL.X", (), lambda reply: None, block_ms=block)

    check_block(command(None), 0.1)
    check_block(command(0), None)
    check_block(command(999), 1.0)
    for block, timeout in [(0, 30.0), (1000, 1.0), (2000, 1.0)]:
        with pytest.raises(ValueError, match="socket_timeout"):
            check_block(command(block), timeout)


# Options that contradict each other: the server's refusal, named.

CLASHES: list[tuple[str, dict[str, Any]]] = [
    ("PEEK and BLOCK", {"peek": True, "block": 1}),
    ("PEEK and PENALTY", {"peek": True, "penalty": "1s"}),
    ("PEEK and SHADOW", {"peek": True, "shadow": True}),
    ("SHADOW and BLOCK", {"shadow": True, "block": 1}),
    ("PENALTY and BLOCK", {"penalty": "1s", "block": 1}),
]


@pytest.mark.parametrize(("words", "options"), CLASHES, ids=[c[0] for c in CLASHES])
def test_options_that_contradict_each_other_are_refused_by_the_server(
    limiter: RateLimiter, r: redis.Redis, words: str, options: Any
) -> None:
    message = f"syntax error: {words} cannot be given together"
    with pytest.raises(InvalidArgumentError, match=f"RL.TOKENBUCKET: {message}"):
        limiter.token_bucket("k", 1, 1, **options)
    with pytest.raises(InvalidArgumentError, match=f"RL.ALL: {message}"):
        limiter.check_all({"k": TokenBucket(1, 1)}, **options)
    assert r.exists("k") == 0


# RL.PEEK


@pytest.mark.parametrize("limit", ONE_EACH, ids=IDS)
def test_peek_answers_what_a_check_would_without_changing_anything(
    limiter: RateLimiter, r: redis.Redis, limit: Limit
) -> None:
    fresh = limiter.peek("k", limit)
    assert fresh.allowed and fresh.remaining == 1 and r.exists("k") == 0
    assert fresh.policy == limit.policy()
    limiter.check("k", limit)
    assert not limiter.peek("k", limit).allowed
    assert limiter.peek("k", limit, cost=2).retry_after is None  # above the limit: never


@pytest.fixture
def primary_and_replica() -> Iterator[tuple[redis.Redis, redis.Redis]]:
    """Two servers of their own, the second a replica of the first (which
    sends its data at once, not after the diskless sync's 5 s delay)."""
    nodes = [Server(), Server()]
    primary, replica = (redis.Redis(port=node.port) for node in nodes)
    try:
        primary.config_set("repl-diskless-sync-delay", 0)
        replica.replicaof("127.0.0.1", nodes[0].port)
        linked = lambda: replica.info("replication")["master_link_status"] == "up"  # noqa: E731
        wait_for("the replica to sync", 10, linked)
        yield primary, replica
    finally:
        primary.close()
        replica.close()
        for node in nodes:
            node.stop()


def test_peek_is_answered_by_a_read_only_replica(
    primary_and_replica: tuple[redis.Redis, redis.Redis],
) -> None:
    primary, replica = primary_and_replica
    RateLimiter(primary).fixed_window("k", 3, "1h")
    wait_for("the check to reach the replica", 5, lambda: replica.exists("k") == 1)
    on_replica = RateLimiter(replica)
    assert on_replica.peek("k", FixedWindow(3, "1h")).remaining == 2
    with pytest.raises(ReadOnlyError):
        on_replica.fixed_window("k", 3, "1h")


# RL.TOP


def test_top_lists_the_keys_denied_most_and_reset_forgets_them(limiter: RateLimiter) -> None:
    limiter.top_reset()
    assert limiter.top() == []
    one = FixedWindow(1, "1h")
    for key, denials in (("a", 3), ("b", 1), ("c", 2)):
        for _ in range(denials + 1):
            limiter.check(key, one)
    limiter.check("a", one, peek=True)  # peeks are not counted
    assert limiter.top() == [TopEntry("a", 3), TopEntry("c", 2), TopEntry("b", 1)]
    assert limiter.top(2, with_error=True) == [TopEntry("a", 3, 0), TopEntry("c", 2, 0)]
    limiter.top_reset()
    assert limiter.top() == []


def test_top_keeps_binary_key_names(limiter: RateLimiter) -> None:
    limiter.top_reset()
    key = b"\xff\x00k"
    limiter.fixed_window(key, 1, "1h")
    limiter.fixed_window(key, 1, "1h")
    (entry,) = limiter.top()
    assert entry.key.encode(errors="surrogateescape") == key


def test_several_servers_lists_merge_by_adding_counts() -> None:
    merged = merge_top(
        [
            [TopEntry("a", 5, 1), TopEntry("b", 4, 0)],
            [TopEntry("c", 9, 0), TopEntry("a", 2, 0), TopEntry("d", 4, 2)],
            [],
        ],
        3,
    )
    assert merged == [TopEntry("c", 9, 0), TopEntry("a", 7, 1), TopEntry("b", 4, 0)]
    no_error = merge_top([[TopEntry("b", 1)], [TopEntry("a", 1)]], 10)
    assert no_error == [TopEntry("a", 1), TopEntry("b", 1)]
