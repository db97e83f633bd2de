"""The sync client against a real server: every command, its options, its
replies under RESP2 and RESP3, and its errors."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.exceptions import NoPermissionError

from redis_ratelimit import (
    GCRA,
    AsyncRateLimiter,
    Decision,
    FixedWindow,
    InvalidArgumentError,
    LeakyBucket,
    ModuleNotLoadedError,
    RateLimiter,
    RateLimitExceeded,
    SlidingCounter,
    SlidingLog,
    TokenBucket,
    WrongTypeError,
)

from .servers import Server

ALGORITHMS: list[tuple[str, Callable[[RateLimiter, str], Decision], int]] = [
    ("tokenbucket", lambda rl, k: rl.token_bucket(k, 3, 1), 3),
    ("slidingcounter", lambda rl, k: rl.sliding_counter(k, 3, "1m"), 3),
    ("fixedwindow", lambda rl, k: rl.fixed_window(k, 3, "1h"), 3),
    ("slidinglog", lambda rl, k: rl.sliding_log(k, 3, 60), 3),
    ("leakybucket", lambda rl, k: rl.leaky_bucket(k, 3, 1), 3),
    ("gcra", lambda rl, k: rl.gcra(k, 2, 1, "1s"), 3),
]


@pytest.mark.parametrize(("algorithm", "call", "limit"), ALGORITHMS, ids=[a[0] for a in ALGORITHMS])
def test_each_algorithm_allows_until_its_limit_then_says_when_to_retry(
    limiter: RateLimiter, algorithm: str, call: Callable[[RateLimiter, str], Decision], limit: int
) -> None:
    first = call(limiter, "k")
    assert (first.allowed, first.limit, first.remaining) == (True, limit, limit - 1)
    assert first.retry_after == timedelta(0)
    assert first.reset_after > timedelta(0)
    assert first.policy is not None and first.policy.name == algorithm
    for _ in range(limit - 1):
        assert call(limiter, "k").allowed
    denied = call(limiter, "k")
    assert not denied.allowed
    assert denied.remaining == 0
    assert denied.retry_after is not None and denied.retry_after > timedelta(0)
    assert limiter.info("k") is not None and limiter.info("k").algorithm == algorithm  # type: ignore[union-attr]


def test_cost_takes_that_much_and_a_cost_above_the_limit_can_never_pass(
    limiter: RateLimiter,
) -> None:
    assert limiter.token_bucket("k", 5, 1, cost=3).remaining == 2
    never = limiter.token_bucket("k", 5, 1, cost=6)
    assert not never.allowed
    assert never.retry_after is None
    assert "Retry-After" not in never.headers()


def test_peek_answers_without_creating_the_key(limiter: RateLimiter, r: redis.Redis) -> None:
    decision = limiter.sliding_log("k", 2, "1m", peek=True, cost=2)
    assert decision.allowed and decision.remaining == 2
    assert r.exists("k") == 0


def test_the_leaky_bucket_says_how_long_to_wait_before_acting(limiter: RateLimiter) -> None:
    assert limiter.leaky_bucket("k", 5, 2).delay == timedelta(0)
    second = limiter.leaky_bucket("k", 5, 2)
    assert timedelta(milliseconds=400) < second.delay <= timedelta(milliseconds=500)


@pytest.mark.parametrize(
    "window", [90.5, "90.5s", "1.5083333333m", timedelta(seconds=90, milliseconds=500)]
)
def test_a_window_given_as_seconds_text_or_timedelta_reaches_the_server_as_the_same_duration(
    limiter: RateLimiter, window: Any
) -> None:
    limiter.sliding_log("k", 5, window)
    info = limiter.info("k")
    assert info is not None and info.fields["window_ms"] == 90_500


def test_a_rate_too_small_for_pythons_repr_is_sent_as_a_plain_decimal(limiter: RateLimiter) -> None:
    # repr(0.00001) is "1e-05"; the client spells it out (the module reads both).
    decision = limiter.token_bucket("k", 1, 0.00001)
    assert decision.reset_after == timedelta(seconds=100_000)


def test_sliding_counter_precision_reaches_the_server(limiter: RateLimiter) -> None:
    limiter.sliding_counter("k", 10, "1m", precision=6)
    info = limiter.info("k")
    assert info is not None and info.fields["precision"] == 6


def test_check_takes_any_limit_and_names_its_policy(limiter: RateLimiter) -> None:
    decision = limiter.check("k", FixedWindow(100, "1m", name="per-minute"))
    assert decision.policy is not None
    assert (decision.policy.name, decision.policy.quota, decision.policy.window) == (
        "per-minute",
        100,
        timedelta(minutes=1),
    )


def test_check_all_takes_from_every_tier_or_from_none(limiter: RateLimiter) -> None:
    tiers = {"{u}:s": TokenBucket(1, 0.001), "{u}:m": SlidingCounter(10, "1m", name="minute")}
    first = limiter.check_all(tiers)
    assert first.allowed
    assert [t.remaining for t in first.tiers] == [0, 9]
    assert [t.policy.name for t in first.tiers if t.policy] == ["tokenbucket", "minute"]
    second = limiter.check_all(list(tiers.items()))
    assert not second.allowed
    assert second.remaining == 0
    assert [t.remaining for t in second.tiers] == [0, 9]  # the minute tier gave nothing


def test_check_all_waits_for_the_slowest_leaky_bucket_tier(limiter: RateLimiter) -> None:
    tiers = [("{u}:a", LeakyBucket(5, 1)), ("{u}:b", GCRA(5, 10, "1s"))]
    limiter.check_all(tiers)
    second = limiter.check_all(tiers)
    assert second.allowed and second.delay > timedelta(milliseconds=900)


def test_check_all_needs_a_tier(limiter: RateLimiter) -> None:
    with pytest.raises(ValueError, match="at least one"):
        limiter.check_all({})


def test_acquire_takes_slots_until_the_limit_and_release_gives_one_back(
    limiter: RateLimiter,
) -> None:
    a = limiter.acquire("k", 2, "30s")
    b = limiter.acquire("k", 2, "30s", lease_id="job-7")
    assert a.allowed and a.id is not None and len(a.id) == 32
    assert b.allowed and b.id == "job-7" and b.remaining == 0
    refused = limiter.acquire("k", 2, "30s")
    assert not refused.allowed and refused.id is None
    assert refused.retry_after is not None and refused.retry_after > timedelta(seconds=29)
    assert limiter.release("k", "job-7") is True
    assert limiter.release("k", "job-7") is False
    assert limiter.acquire("k", 2, "30s").allowed


def test_acquiring_again_with_a_held_id_renews_it_without_a_second_slot(
    limiter: RateLimiter,
) -> None:
    limiter.acquire("k", 2, "1s", lease_id="job")
    renewed = limiter.acquire("k", 2, "30s", lease_id="job")
    assert renewed.allowed and renewed.remaining == 1


def test_hold_keeps_a_slot_while_the_block_runs_and_gives_it_back(limiter: RateLimiter) -> None:
    with limiter.hold("k", 1, "30s") as lease:
        assert lease.allowed
        with pytest.raises(RateLimitExceeded) as refused, limiter.hold("k", 1, "30s"):
            pytest.fail("the block ran without a slot")
        assert refused.value.decision.headers()["Retry-After"] == "30"
    assert limiter.info("k") is None  # releasing the last lease deletes the key


def test_hold_gives_the_slot_back_when_the_block_raises(limiter: RateLimiter) -> None:
    with pytest.raises(KeyError), limiter.hold("k", 1, "30s"):
        raise KeyError("boom")
    assert limiter.acquire("k", 1, "30s").allowed


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_info_reads_the_same_under_resp2_and_resp3(server: Server, protocol: int) -> None:
    client = redis.Redis(port=server.port, protocol=protocol)
    client.flushall()
    limiter = RateLimiter(client)
    limiter.token_bucket("tb", 10, 0.5)
    limiter.acquire("c", 3, "1m", lease_id="job")
    tb, c = limiter.info("tb"), limiter.info("c")
    assert tb is not None and c is not None
    assert tb.algorithm == "tokenbucket" and tb.remaining == 9
    assert tb.fields["rate_per_s"] == 0.5 and tb.fields["tokens"] == 9.0
    assert timedelta(seconds=1) < tb.reset_after <= timedelta(seconds=2)
    # The key expires when its state is fresh again, or up to the module's
    # expiry slack (1 s by default) later.
    assert tb.reset_after <= tb.ttl <= tb.reset_after + timedelta(seconds=1)
    assert c.algorithm == "concurrency" and c.fields["limit"] == 3
    assert c.fields["leases"] == [["job", c.fields["updated_ms"] + 60_000]]  # type: ignore[operator]
    assert limiter.info("missing") is None


def test_a_client_decoding_responses_reads_the_same(server: Server) -> None:
    limiter = RateLimiter(redis.Redis(port=server.port, decode_responses=True))
    assert limiter.acquire("k", 1, "1s", lease_id="x").id == "x"
    info = limiter.info("k")
    assert info is not None and info.algorithm == "concurrency"


def test_cl_throttle_reads_redis_cells_reply_into_a_decision(limiter: RateLimiter) -> None:
    first = limiter.cl_throttle("k", 1, 1, 60)
    assert (first.allowed, first.limit, first.remaining, first.retry_after) == (
        True,
        2,
        1,
        timedelta(0),
    )
    limiter.cl_throttle("k", 1, 1, 60)
    denied = limiter.cl_throttle("k", 1, 1, 60)
    assert not denied.allowed and denied.retry_after == timedelta(seconds=60)
    assert limiter.cl_throttle("other", 1, 1, 60, quantity=5).retry_after is None


ERRORS: list[tuple[str, Callable[[RateLimiter], object], type[Exception], str]] = [
    ("a cost of 0", lambda rl: rl.gcra("k", 1, 1, 1, cost=0), InvalidArgumentError, "COST"),
    (
        "a precision above 1000",
        lambda rl: rl.sliding_counter("k", 1, 1, precision=1001),
        InvalidArgumentError,
        "PRECISION",
    ),
    (
        "a repeated key in RL.ALL",
        lambda rl: rl.check_all([("a", TokenBucket(1, 1)), ("a", TokenBucket(1, 1))]),
        InvalidArgumentError,
        "more than once",
    ),
    ("a string key", lambda rl: rl.token_bucket("s", 1, 1), WrongTypeError, "WRONGTYPE"),
    ("another algorithm's key", lambda rl: rl.gcra("tb", 1, 1, 1), WrongTypeError, "WRONGTYPE"),
    ("RL.INFO on a string key", lambda rl: rl.info("s"), WrongTypeError, "RL.INFO: WRONGTYPE"),
]


@pytest.mark.parametrize(("case", "call", "error", "text"), ERRORS, ids=[e[0] for e in ERRORS])
def test_an_error_reply_raises_a_named_exception_with_the_servers_words(
    limiter: RateLimiter,
    r: redis.Redis,
    case: str,
    call: Callable[[RateLimiter], object],
    error: type[Exception],
    text: str,
) -> None:
    r.set("s", "a string")
    limiter.token_bucket("tb", 1, 1)
    with pytest.raises(error) as raised:
        call(limiter)
    assert text.lower() in str(raised.value).lower()
    assert isinstance(raised.value, redis.ResponseError)  # existing handlers still catch it


BUILT: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    ("zero capacity", lambda: TokenBucket(0, 1), ValueError, "capacity must be at least 1"),
    (
        "a window the module cannot read",
        lambda: FixedWindow(1, "1 fortnight"),
        ValueError,
        "window='1 fortnight' is not a duration",
    ),
    ("a space before the unit", lambda: FixedWindow(5, "60 s"), ValueError, "no space"),
    ("words for the unit", lambda: FixedWindow(5, "1 minute"), ValueError, "no space"),
    (
        "a negative timedelta",
        lambda: SlidingLog(1, timedelta(seconds=-1)),
        ValueError,
        "is not a duration above 0",
    ),
    ("a Decimal rate", lambda: TokenBucket(1, Decimal(1)), TypeError, "not Decimal"),  # type: ignore[arg-type]
    ("a str capacity", lambda: TokenBucket("5", 1), TypeError, "must be an int"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("case", "call", "error", "text"), BUILT, ids=[e[0] for e in BUILT])
def test_a_limit_the_module_would_refuse_is_refused_when_built(
    case: str, call: Callable[[], object], error: type[Exception], text: str
) -> None:
    with pytest.raises(error) as raised:
        call()
    assert text in str(raised.value)


def test_a_client_of_the_wrong_kind_is_a_type_error_naming_the_fix(
    r: redis.Redis, server: Server
) -> None:
    with pytest.raises(TypeError, match=r"give it redis.asyncio.Redis\(...\)"):
        AsyncRateLimiter(r)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"give it redis.Redis\(...\)"):
        RateLimiter(redis.asyncio.Redis(port=server.port))  # type: ignore[arg-type]


def test_module_errors_are_also_the_builtin_kind_they_are(
    limiter: RateLimiter, r: redis.Redis
) -> None:
    with pytest.raises(ValueError):
        limiter.gcra("k", 1, 1, 1, cost=0)
    r.set("s", "x")
    with pytest.raises(TypeError):
        limiter.token_bucket("s", 1, 1)


def test_an_error_that_is_not_the_modules_keeps_redis_pys_own_exception(
    server: Server, r: redis.Redis
) -> None:
    r.acl_setuser(
        "no-rl", enabled=True, nopass=True, keys="*", commands=["+@all", "-rl.tokenbucket"]
    )
    try:
        limited = RateLimiter(redis.Redis(port=server.port, username="no-rl", password="x"))
        with pytest.raises(NoPermissionError):
            limited.token_bucket("k", 1, 1)
    finally:
        r.acl_deluser("no-rl")


def test_a_server_without_the_module_says_so() -> None:
    plain = Server(module=False)
    try:
        with pytest.raises(ModuleNotLoadedError, match="module loaded"):
            RateLimiter(redis.Redis(port=plain.port)).token_bucket("k", 1, 1)
    finally:
        plain.stop()
