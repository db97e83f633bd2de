"""The HTTP fields a decision gives, and the windows its policy states.

These are pure: a Decision built by hand is what a reply would give, and
what is tested is only the arithmetic and spelling of the fields (the
replies themselves are tested against the server in test_client.py).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from redis_ratelimit import (
    GCRA,
    Decision,
    FixedWindow,
    LeakyBucket,
    Policy,
    SlidingCounter,
    SlidingLog,
    TokenBucket,
)
from redis_ratelimit.units import ceil_seconds, decimal_arg, duration_arg, duration_ms


def decision(
    allowed: bool, remaining: int, retry_ms: int | None, reset_ms: int, **kw: object
) -> Decision:
    return Decision(
        allowed=allowed,
        limit=10,
        remaining=remaining,
        retry_after=None if retry_ms is None else timedelta(milliseconds=retry_ms),
        reset_after=timedelta(milliseconds=reset_ms),
        **kw,  # type: ignore[arg-type]
    )


def test_an_allowed_decision_gives_the_legacy_set_in_seconds_rounded_up() -> None:
    assert decision(True, 7, 0, 2001).headers(ietf=False) == {
        "X-RateLimit-Limit": "10",
        "X-RateLimit-Remaining": "7",
        "X-RateLimit-Reset": "3",
    }


@pytest.mark.parametrize(
    ("retry_ms", "seconds"), [(1, "1"), (999, "1"), (1000, "1"), (1001, "2"), (59_999, "60")]
)
def test_retry_after_is_rounded_up_so_a_client_that_waits_is_never_early(
    retry_ms: int, seconds: str
) -> None:
    assert decision(False, 0, retry_ms, 60_000).headers()["Retry-After"] == seconds


def test_retry_after_is_left_out_when_the_request_can_never_pass() -> None:
    headers = decision(False, 3, None, 5000).headers()
    assert "Retry-After" not in headers
    assert headers["X-RateLimit-Remaining"] == "3"


def test_ietf_fields_name_the_policy_with_its_quota_window_remaining_and_reset() -> None:
    d = decision(True, 45, 0, 29_001, policy=Policy("api", 100, timedelta(minutes=1)))
    assert d.headers(legacy=False) == {
        "RateLimit-Policy": '"api";q=100;w=60',
        "RateLimit": '"api";r=45;t=30',
    }


def test_t_is_the_time_until_fresh_whether_the_reply_allowed_or_denied() -> None:
    # The same stored state, told by the last allowed request and by a denied
    # one a moment later: t does not jump (issue 21, item 4).
    policy = Policy("api", 100, timedelta(minutes=1))
    allowed = decision(True, 0, 0, 60_000, policy=policy)
    denied = decision(False, 0, 2500, 59_999, policy=policy)
    assert allowed.headers()["RateLimit"] == denied.headers()["RateLimit"] == '"api";r=0;t=60'
    assert denied.headers()["Retry-After"] == "3"


def test_every_tier_is_an_item_and_tiers_of_one_name_are_told_apart() -> None:
    tiers = (
        decision(True, 2, 0, 1000, policy=SlidingCounter(10, "1s").policy()),
        decision(False, 0, 4000, 50_000, policy=SlidingCounter(100, "1m").policy()),
        decision(True, 900, 0, 3_000_000, policy=FixedWindow(1000, "1h", name="hour").policy()),
    )
    d = decision(False, 0, 4000, 3_000_000, tiers=tiers)
    headers = d.headers()
    assert headers["RateLimit-Policy"] == (
        '"slidingcounter";q=10;w=1, "slidingcounter-2";q=100;w=60, "hour";q=1000;w=3600'
    )
    assert headers["RateLimit"] == (
        '"slidingcounter";r=2;t=1, "slidingcounter-2";r=0;t=50, "hour";r=900;t=3000'
    )
    assert headers["X-RateLimit-Remaining"] == "0"


def test_a_concurrency_policy_states_its_unit_and_no_window() -> None:
    assert (
        Policy("uploads", 3, unit="concurrent-requests").item()
        == '"uploads";q=3;qu="concurrent-requests"'
    )


def test_a_policy_name_is_escaped_as_a_structured_field_string() -> None:
    assert Policy('say "hi" \\o/', 1).item() == '"say \\"hi\\" \\\\o/";q=1'


@pytest.mark.parametrize("name", ["", "caf\u00e9", "tab\there"])
def test_a_name_the_fields_cannot_carry_is_refused_when_the_limit_is_made(name: str) -> None:
    with pytest.raises(ValueError, match="printable ASCII"):
        TokenBucket(1, 1, name=name)


def test_no_header_set_asked_gives_only_retry_after() -> None:
    assert decision(False, 0, 1500, 1500).headers(legacy=False, ietf=False) == {"Retry-After": "2"}


@pytest.mark.parametrize(
    ("limit", "quota", "window_s"),
    [
        (TokenBucket(10, 0.5), 10, 20),  # empty to full: 10 tokens at 0.5 a second
        (LeakyBucket(5, 2), 5, 3),  # 2.5 s, rounded up
        (GCRA(9, 10, "1s"), 10, 1),  # 10 a second, bursts of 9 beyond: 10 in 1 s
        (GCRA(0, 1, "1m"), 1, 60),
        (GCRA(4, 1, "1m"), 5, 300),  # 1 a minute, bursts of 4 beyond: 5 in 5 minutes
        (SlidingCounter(100, "250ms"), 100, 1),  # the draft's w is at least 1
        (SlidingLog(5, "15m"), 5, 900),
        (FixedWindow(1000, timedelta(days=1)), 1000, 86_400),
    ],
)
def test_each_limit_states_its_quota_over_the_span_it_takes_to_be_fresh(
    limit: TokenBucket, quota: int, window_s: int
) -> None:
    item = limit.policy().item()
    assert item.endswith(f";q={quota};w={window_s}")


def test_a_window_the_client_cannot_read_is_refused_when_the_limit_is_made() -> None:
    with pytest.raises(ValueError, match="'soon' is not a duration"):
        SlidingLog(5, "soon")


@pytest.mark.parametrize(
    ("value", "arg"),
    [(1, "1"), (0.5, "0.5"), (0.00001, "0.00001"), (1e20, "100000000000000000000"), (2.0, "2.0")],
)
def test_numbers_are_sent_as_plain_decimals(value: float, arg: str) -> None:
    assert decimal_arg(value) == arg


@pytest.mark.parametrize(
    ("value", "arg", "ms"),
    [
        (60, "60", 60_000),
        ("1.5m", "1.5m", 90_000),
        ("250MS", "250MS", 250),
        (" 2 h ", " 2 h ", None),  # the module refuses spaces, so does the client
        (timedelta(seconds=1, microseconds=500), "1000.500ms", 1000.5),
        (timedelta(minutes=-1), "-60000ms", -60_000),
        ("1 fortnight", "1 fortnight", None),
        (float("inf"), "Infinity", None),
    ],
)
def test_durations_are_sent_as_given_and_read_back_in_milliseconds(
    value: object, arg: str, ms: float | None
) -> None:
    assert duration_arg(value) == arg  # type: ignore[arg-type]
    assert duration_ms(value) == ms  # type: ignore[arg-type]


@pytest.mark.parametrize(("ms", "seconds"), [(0, 0), (1, 1), (1000, 1), (1001, 2), (-1, 0)])
def test_ceil_seconds_rounds_up(ms: int, seconds: int) -> None:
    assert ceil_seconds(timedelta(milliseconds=ms)) == seconds
