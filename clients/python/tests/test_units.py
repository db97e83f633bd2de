"""Rate strings read exactly (a unit is known or refused), and limits too
large for a timedelta accepted (issue 30, item 10)."""

from __future__ import annotations

import pytest
import redis

from redis_ratelimit import (
    GCRA,
    FixedWindow,
    LeakyBucket,
    RateLimiter,
    SlidingCounter,
    TokenBucket,
)
from redis_ratelimit.limits import parse_rates
from redis_ratelimit.web import Rule

from .apps import parses


@pytest.mark.parametrize(
    ("text", "window_ms"),
    [
        ("10/ms", 1),
        ("5 per 10 ms", 10),
        ("10 per millisecond", 1),
        ("10/second", 1000),
        ("10/s", 1000),
        ("5 per 10 seconds", 10_000),
        ("3/m", 60_000),
        ("3 per minutes", 60_000),
        ("2/hour", 3_600_000),
        ("2 per 2 hrs", 7_200_000),
        ("1/day", 86_400_000),
    ],
)
def test_a_rate_string_is_read_in_the_unit_it_names(text: str, window_ms: int) -> None:
    (limit,) = parse_rates(text)
    assert limit.window_ms() == window_ms


@pytest.mark.parametrize("text", ["10/hs", "10/mss", "1/month", "1/year", "1/week", "1/mo", "1/"])
def test_an_unknown_or_ambiguous_unit_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not N/unit"):
        parse_rates(text)


def test_rate_names_keep_their_spelling_so_keys_stay_the_same() -> None:
    names = [limit.name for limit in parse_rates("5 per 10 seconds; 100/minute; 10/ms")]
    assert names == ["5-per-10second", "100-per-minute", "10-per-ms"]


def test_a_millisecond_rate_is_counted_by_the_server_in_milliseconds(r: redis.Redis) -> None:
    (limit,) = parse_rates("2 per 10 ms")
    limiter = RateLimiter(r)
    decisions = [limiter.check("k", limit) for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, False]
    retry = decisions[2].retry_after
    assert retry is not None and retry.total_seconds() <= 0.02


@pytest.mark.parametrize(
    "limit",
    [
        lambda: TokenBucket(10**14, 1),
        lambda: TokenBucket(2**53 - 1, 1),
        lambda: LeakyBucket(10**14, 0.001),
        lambda: GCRA(10**12, 1, "366d"),
    ],
)
def test_limits_beyond_a_timedelta_are_accepted_and_checked(r: redis.Redis, limit: object) -> None:
    made = limit()  # type: ignore[operator]
    rule = Rule(made)
    rule.validate(r)
    decision = RateLimiter(r).check("huge", made)
    assert decision.allowed
    headers = decision.headers()
    # The window, past a timedelta's range, is sent as its longest (and parses).
    assert headers["RateLimit-Policy"].endswith(";w=86400000000000")
    parses(headers)


@pytest.mark.parametrize(
    "limit",
    [lambda: FixedWindow(10, 10**20), lambda: SlidingCounter(10, "100000000000d")],
)
def test_a_window_the_server_refuses_is_a_value_error_naming_it(
    r: redis.Redis, limit: object
) -> None:
    rule = Rule(limit())  # type: ignore[operator]  # built: no OverflowError
    with pytest.raises(ValueError, match="window must be"):
        rule.validate(r)
