"""Issue 21: the middleware at the edges of real deployments, each against
real servers: no client address (uvicorn on a unix socket, WSGI without
REMOTE_ADDR), Redis refused and hung, the binding limit's headers, keys that
would collide, several identities in one rule, errors at start-up, the
local denial cache."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import flask
import httpx
import pytest
import redis
import redis.asyncio

from redis_ratelimit import (
    GCRA,
    Decision,
    FixedWindow,
    LeakyBucket,
    Limit,
    Policy,
    RateLimiter,
    SlidingCounter,
    SlidingLog,
    TokenBucket,
    WrongTypeError,
)
from redis_ratelimit.commands import check
from redis_ratelimit.web import (
    RateLimitMiddleware,
    RateLimitWSGIMiddleware,
    Rule,
    exempt_methods,
    exempt_paths,
)
from redis_ratelimit.web.flask import rate_limit
from redis_ratelimit.web.guard import SyncGuard

from .apps import asgi, flask_app, parses, wsgi
from .servers import Server, free_port, wait_for

HERE = Path(__file__).resolve().parent


# 1. No silent bypass ---------------------------------------------------------


@pytest.fixture
def uvicorn_on_a_unix_socket(server: Server) -> Iterator[str]:
    socket_dir = tempfile.mkdtemp(prefix="rl-uds-")
    path = f"{socket_dir}/uv.sock"
    env = {
        **os.environ,
        "RL_TEST_REDIS_PORT": str(server.port),
        "PYTHONPATH": os.pathsep.join([*sys.path, str(HERE.parent)]),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "tests.uds_app:app",
            "--uds",
            path,
            "--log-level",
            "warning",
        ],
        cwd=HERE.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for("uvicorn's socket", 20, lambda: os.path.exists(path))
        yield path
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=10)
        shutil.rmtree(socket_dir, ignore_errors=True)
        # The one warning the rule gives, once, for all the requests.
        assert out.decode().count("has no identity") == 1, out.decode()


def test_under_uvicorn_on_a_unix_socket_requests_without_an_address_are_still_limited(
    uvicorn_on_a_unix_socket: str, r: redis.Redis
) -> None:
    transport = httpx.HTTPTransport(uds=uvicorn_on_a_unix_socket)
    with httpx.Client(transport=transport, base_url="http://uv") as http:
        codes = [http.get("/hello").status_code for _ in range(12)]
    assert codes == [200] * 10 + [429] * 2
    assert r.keys() == [b"rl:{missing}:fixedwindow"]


def test_under_wsgi_without_remote_addr_requests_share_one_identity_warned_once(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    http = wsgi(flask_app(), r, limits=FixedWindow(3, "1h"))
    with caplog.at_level(logging.WARNING, "redis_ratelimit"):
        codes = [
            http.get("/hello", environ_overrides={"REMOTE_ADDR": ""}).status_code for _ in range(5)
        ]
    assert codes == [200, 200, 200, 429, 429]
    assert sum("has no identity" in m for m in caplog.messages) == 1


# 2. Outages cost microseconds ----------------------------------------------


def percentiles(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


@pytest.fixture
def hung() -> Iterator[Server]:
    """A Redis that accepts connections and never answers (SIGSTOP)."""
    s = Server()
    os.kill(s.process.pid, signal.SIGSTOP)
    try:
        yield s
    finally:
        os.kill(s.process.pid, signal.SIGCONT)
        s.stop()


def report(what: str, first: float, times: list[float]) -> None:
    p50, p99 = percentiles(times)
    ms = [f"{x * 1000:.3f}" for x in (first, p50, p99)]
    print(f"\n{what}: first {ms[0]} ms, then p50 {ms[1]} ms, p99 {ms[2]} ms")


@pytest.mark.parametrize("outage", ["refused", "hung"])
def test_wsgi_with_redis_down_answers_in_microseconds_after_the_first_failure(
    outage: str, request: pytest.FixtureRequest
) -> None:
    port = free_port() if outage == "refused" else request.getfixturevalue("hung").port
    # redis-py's defaults (retries with backoff, no socket timeout): the
    # middleware's own budget applies whatever they are.
    http = wsgi(flask_app(), redis.Redis(port=port), limits=TokenBucket(10, 1))
    times = []
    for _ in range(101):
        start = time.perf_counter()
        assert http.get("/hello").status_code == 200  # fail open
        times.append(time.perf_counter() - start)
    report(f"WSGI, Redis {outage}", times[0], times[1:])
    assert times[0] < 1.0
    p50, p99 = percentiles(times[1:])
    assert p50 < 0.01 and p99 < 0.25  # the goal is 50 ms; room for a loaded machine


@pytest.mark.anyio
@pytest.mark.parametrize("outage", ["refused", "hung"])
async def test_asgi_with_redis_down_answers_in_microseconds_after_the_first_failure(
    outage: str, request: pytest.FixtureRequest
) -> None:
    port = free_port() if outage == "refused" else request.getfixturevalue("hung").port
    app = asgi(redis.asyncio.Redis(port=port), limits=TokenBucket(10, 1), fail_open=False)
    transport = httpx.ASGITransport(app=app, client=("10.0.0.7", 50000))
    times = []
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        for _ in range(101):
            start = time.perf_counter()
            assert (await http.get("/hello")).status_code == 503  # fail closed
            times.append(time.perf_counter() - start)
    report(f"ASGI, Redis {outage}", times[0], times[1:])
    assert times[0] < 1.0
    p50, p99 = percentiles(times[1:])
    assert p50 < 0.01 and p99 < 0.25  # the goal is 50 ms; room for a loaded machine


def test_after_an_outage_the_first_request_past_the_cool_down_finds_redis_again() -> None:
    s = Server()
    try:
        client = redis.Redis(port=s.port)
        http = wsgi(flask_app(), client, limits=TokenBucket(10, 1), cooldown=0.5)
        assert "X-RateLimit-Limit" in http.get("/hello").headers
        os.kill(s.process.pid, signal.SIGSTOP)
        assert "X-RateLimit-Limit" not in http.get("/hello").headers  # timed out: open
        os.kill(s.process.pid, signal.SIGCONT)
        back = time.perf_counter()
        while "X-RateLimit-Limit" not in http.get("/hello").headers:
            time.sleep(0.01)
            assert time.perf_counter() - back < 5
        recovered = time.perf_counter() - back
        print(f"\nrecovered {recovered * 1000:.0f} ms after Redis came back (cool-down 500 ms)")
        assert recovered < 2
    finally:
        s.stop()


# 3, 4, 9. Headers tell the binding truth -------------------------------------


@pytest.mark.anyio
async def test_the_legacy_headers_and_retry_after_come_from_the_limit_that_denied(
    ar: redis.asyncio.Redis,
) -> None:
    app = asgi(ar, limits=[TokenBucket(10, 1), SlidingCounter(100, 60, name="per-minute")])
    transport = httpx.ASGITransport(app=app, client=("10.0.0.7", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        responses = [await http.get("/hello") for _ in range(11)]
    last_allowed, denied = responses[9], responses[10]
    assert denied.status_code == 429
    h = denied.headers
    assert (h["x-ratelimit-limit"], h["x-ratelimit-remaining"]) == ("10", "0")
    assert h["x-ratelimit-reset"] == "1"  # the bucket's next token, not the minute's end
    assert h["retry-after"] == "1"
    # t: the same for the same stored state, allowed or denied.
    assert last_allowed.headers["ratelimit"].split(",")[0] == h["ratelimit"].split(",")[0]
    for response in responses:
        parses(response.headers)


def test_every_integer_is_clamped_to_15_digits_so_every_field_parses() -> None:
    huge = 10**18
    policy = Policy("big", huge, None)
    d = Decision(False, huge, huge, timedelta(days=10**8), timedelta(days=10**8), policy=policy)
    headers = d.headers()
    parses(headers)
    assert headers["X-RateLimit-Limit"] == "999999999999999"
    assert "q=999999999999999" in headers["RateLimit-Policy"]


# 5. Keys never collide -----------------------------------------------------


def make_blueprint(name: str, r: redis.Redis, view_name: str) -> flask.Blueprint:
    bp = flask.Blueprint(name, __name__, url_prefix=f"/{name}")

    def view() -> str:
        return name

    view.__qualname__ = f"{name}.{view_name}"  # as if defined in a module of its own
    bp.route("/list")(rate_limit(r, FixedWindow(2, "1h"))(view))
    return bp


def test_two_blueprints_index_views_count_apart(r: redis.Redis) -> None:
    app = flask.Flask(__name__)
    app.register_blueprint(make_blueprint("admin", r, "index"))
    app.register_blueprint(make_blueprint("public", r, "index"))
    http = app.test_client()
    assert [http.get("/admin/list").status_code for _ in range(2)] == [200, 200]
    assert http.get("/public/list").status_code == 200


def test_two_rules_that_would_share_keys_are_refused_at_start_up(r: redis.Redis) -> None:
    def view() -> str:
        return "x"

    with pytest.raises(ValueError, match="would share the Redis keys"):
        rate_limit(r, FixedWindow(2, "1h"))(rate_limit(r, FixedWindow(3, "1h"))(view))
    app = flask.Flask(__name__)
    first = RateLimitWSGIMiddleware(app.wsgi_app, redis=r, limits=TokenBucket(5, 1))
    with pytest.raises(ValueError, match="give one of them another scope="):
        RateLimitWSGIMiddleware(app.wsgi_app, redis=r, limits=TokenBucket(9, 1))
    assert first.rule.limits == (TokenBucket(5, 1),)  # alive until here


# 8, 10. Errors at start-up -------------------------------------------------

STARTUP: list[tuple[str, Callable[[redis.Redis], object], type[Exception], str]] = [
    ("words for the unit", lambda r: Rule(FixedWindow(5, "1 minute")), ValueError, "no space"),
    (
        "a cost of 0",
        lambda r: Rule(TokenBucket(5, 1), cost=0),
        ValueError,
        "cost must be at least 1",
    ),
    (
        "duplicate names",
        lambda r: Rule([TokenBucket(5, 1), TokenBucket(9, 1)]),
        ValueError,
        "must differ",
    ),
    (
        "a misspelled keyword",
        lambda r: RateLimitWSGIMiddleware(
            flask_app().wsgi_app, redis=r, limits=TokenBucket(5, 1), fail_opne=False
        ),  # type: ignore[call-arg]
        TypeError,
        "fail_opne",
    ),
    (
        "shadow='no'",
        lambda r: Rule(TokenBucket(5, 1), shadow="no"),  # type: ignore[arg-type]
        TypeError,
        "shadow must be True or False",
    ),
    (
        "a sync client in the ASGI middleware",
        lambda r: RateLimitMiddleware(asgi(r), redis=r, limits=TokenBucket(5, 1)),  # type: ignore[arg-type]
        TypeError,
        "redis.asyncio.Redis(...)",
    ),
]


@pytest.mark.parametrize(("case", "build", "error", "text"), STARTUP, ids=[s[0] for s in STARTUP])
def test_a_wrong_rule_fails_when_built(
    r: redis.Redis,
    case: str,
    build: Callable[[redis.Redis], object],
    error: type[Exception],
    text: str,
) -> None:
    with pytest.raises(error) as raised:
        build(r)
    assert text in str(raised.value)


# The local denial cache ----------------------------------------------------


def rl_calls(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k.startswith("cmdstat_rl."))


def test_a_denied_key_is_answered_locally_until_its_retry_time(r: redis.Redis) -> None:
    r.config_resetstat()
    http = wsgi(flask_app(), r, limits=FixedWindow(5, "1s"))
    seconds, sent, codes = 2.0, 0, []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        response = http.get("/hello")
        codes.append(response.status_code)
        sent += 1
        if response.status_code == 429:
            parses(response.headers)
            assert int(response.headers["Retry-After"]) == 1
    calls = rl_calls(r)
    print(f"\n{sent} requests in {seconds:g} s, {codes.count(200)} allowed, {calls} RL calls")
    # At most the limit per window and one call per retry period (plus a
    # window boundary's worth of slack), however many were sent.
    assert sent > 100
    assert calls <= 5 * 3 + 3 + 2
    assert codes.count(200) <= 5 * 3


def test_the_plain_client_asks_redis_every_time_unless_told_to_cache_denials(
    r: redis.Redis,
) -> None:
    limit = FixedWindow(2, "1h")
    r.config_resetstat()
    plain = RateLimiter(r)
    assert [plain.check("a", limit).allowed for _ in range(10)] == [True] * 2 + [False] * 8
    assert rl_calls(r) == 10
    r.config_resetstat()
    caching = RateLimiter(r, denial_cache=True)
    decisions = [caching.check("b", limit) for _ in range(10)]
    assert [d.allowed for d in decisions] == [True] * 2 + [False] * 8
    assert rl_calls(r) == 3  # two allowed, one denied; the other seven answered locally
    assert decisions[-1].retry_after is not None and decisions[-1].retry_after.total_seconds() > 0
    # A peek is never answered from the cache: it asks what Redis holds.
    assert caching.peek("b", limit).allowed is False and rl_calls(r) == 4


SAME_STATE = [
    TokenBucket(3, 0.3),
    LeakyBucket(3, 0.3),
    GCRA(2, 3, 10),
    FixedWindow(3, 10),
    SlidingLog(3, 10),
    SlidingCounter(3, 10),
]


@pytest.mark.parametrize("limit", SAME_STATE, ids=[type(x).__name__ for x in SAME_STATE])
def test_t_is_the_same_for_the_same_stored_state_allowed_or_denied(
    limiter: RateLimiter, limit: Limit
) -> None:
    last_allowed = [limiter.check("k", limit) for _ in range(3)][-1]
    denied = limiter.check("k", limit)
    assert last_allowed.allowed and not denied.allowed
    assert last_allowed.remaining == denied.remaining == 0
    # The same state, a few milliseconds apart: the same time to more quota.
    gap = last_allowed.more_quota_in() - denied.more_quota_in()
    assert timedelta(0) <= gap < timedelta(milliseconds=100), gap
    if limit.refill_ms() is not None:  # a steady refill: the next unit, when a retry passes
        assert denied.retry_after is not None
        assert abs(denied.more_quota_in() - denied.retry_after) < timedelta(milliseconds=2)


def test_a_probe_that_meets_an_error_reply_closes_the_breaker(r: redis.Redis) -> None:
    # Redis answered (WRONGTYPE): it is up, and the next request must ask it
    # again rather than find the breaker stuck half-open.
    guard = SyncGuard(redis.Redis(port=free_port()), timeout=0.1, cooldown=0.05)
    with pytest.raises(redis.ConnectionError):
        guard.run(check("k", TokenBucket(1, 1)))
    assert not guard.breaker.closed
    up = SyncGuard(r, timeout=0.5, cooldown=0.05)
    up.breaker.failed()
    time.sleep(0.06)
    r.set("k", "a string")
    with pytest.raises(WrongTypeError):
        up.run(check("k", TokenBucket(1, 1)))
    assert up.breaker.closed
    assert up.run(check("other", TokenBucket(1, 1))).allowed


def test_exempt_helpers(r: redis.Redis) -> None:
    http = wsgi(
        flask_app(),
        r,
        limits=FixedWindow(1, "1h"),
        exempt=lambda req: exempt_methods("OPTIONS")(req) or exempt_paths("/hel")(req),
    )
    assert [http.get("/hello").status_code for _ in range(3)] == [200, 200, 200]
    assert [http.options("/hello").status_code for _ in range(2)] == [200, 200]
    assert r.keys() == []
