"""One client let start afresh: `reset` clears Redis and the denial cache,
and other processes' caches lag by a bounded time (issue 30, item 14)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import flask
import httpx
import pytest
import redis
import redis.asyncio
from redis.cluster import RedisCluster

from redis_ratelimit import FixedWindow
from redis_ratelimit.cache import DEFAULT_MAX_AGE_S
from redis_ratelimit.web import RateLimitWSGIMiddleware, Rule, reset

from .servers import Cluster, Server, free_port, wait_for

HERE = Path(__file__).resolve().parent


def login_app(r: redis.Redis | RedisCluster, **options: object) -> flask.testing.FlaskClient:
    app = flask.Flask(__name__)
    app.route("/login")(lambda: "welcome")
    rule = Rule(FixedWindow(2, "1h", name="login"), penalty="1h", scope="login", **options)  # type: ignore[arg-type]
    app.wsgi_app = RateLimitWSGIMiddleware(app.wsgi_app, redis=r, rule=rule)  # type: ignore[method-assign]
    return app.test_client()


def test_reset_lets_one_client_start_afresh_at_once(r: redis.Redis) -> None:
    http = login_app(r)
    assert [http.get("/login").status_code for _ in range(4)] == [200, 200, 429, 429]
    r.set("rl:{ip:10.9.9.9}:login:fixedwindow", "another client's")
    # The denial is cached for up to the bound: no wait needed after reset.
    assert reset(r, "ip:127.0.0.1") == 1
    assert [http.get("/login").status_code for _ in range(3)] == [200, 200, 429]
    assert r.get("rl:{ip:10.9.9.9}:login:fixedwindow") == b"another client's"


def test_reset_escapes_the_identity_in_its_pattern(r: redis.Redis) -> None:
    r.set("rl:{user:a*}:x", 1)
    r.set("rl:{user:ab}:x", 1)
    assert reset(r, "user:a*") == 1
    assert r.keys() == [b"rl:{user:ab}:x"]


def test_an_operators_flushall_is_seen_within_the_cache_bound(r: redis.Redis) -> None:
    http = login_app(r)
    assert [http.get("/login").status_code for _ in range(3)] == [200, 200, 429]
    r.flushall()  # behind the process's back: its cache still holds the denial
    time.sleep(DEFAULT_MAX_AGE_S + 0.1)
    assert http.get("/login").status_code == 200  # was 429 for the penalty's hour


@pytest.mark.anyio
async def test_reset_with_an_asyncio_client(r: redis.Redis, ar: redis.asyncio.Redis) -> None:
    http = login_app(r)
    assert [http.get("/login").status_code for _ in range(3)] == [200, 200, 429]
    assert await reset(ar, "ip:127.0.0.1") == 1
    assert http.get("/login").status_code == 200


def test_reset_on_a_cluster(cluster: Cluster) -> None:
    rc = RedisCluster(host="127.0.0.1", port=cluster.port)
    rc.flushall()
    http = login_app(rc, prefix="rlc")
    assert [http.get("/login").status_code for _ in range(3)] == [200, 200, 429]
    assert reset(rc, "ip:127.0.0.1", prefix="rlc") == 1
    assert http.get("/login").status_code == 200
    rc.close()


@pytest.fixture
def gunicorn(server: Server) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "RL_TEST_REDIS_PORT": str(server.port)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--workers",
            "3",
            "--bind",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
            "tests.gunicorn_app:app",
        ],
        cwd=HERE.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return httpx.get(url + "/").status_code == 404
        except httpx.TransportError:
            return False

    try:
        wait_for("gunicorn to answer", 30, answers)
        yield url
    finally:
        process.terminate()
        process.communicate(timeout=20)


def by_worker(url: str, rounds: int) -> list[tuple[str, int]]:
    """(worker pid, status) of `rounds` requests, six at a time, so that
    every worker takes some."""

    def one(_: int) -> tuple[str, int]:
        response = httpx.get(url + "/login")
        return response.headers["X-Worker"], response.status_code

    with ThreadPoolExecutor(6) as pool:
        return list(pool.map(one, range(rounds)))


def test_under_gunicorn_every_worker_sees_a_reset_within_the_bound(
    gunicorn: str, r: redis.Redis
) -> None:
    r.flushall()
    seen = by_worker(gunicorn, 120)
    denied_by = {pid for pid, status in seen if status == 429}
    assert len(denied_by) == 3, seen  # every worker has the denial cached
    assert sum(status == 200 for _, status in seen) == 2
    assert reset(r, "ip:127.0.0.1") == 1  # from another process: the workers' caches stay
    time.sleep(DEFAULT_MAX_AGE_S + 0.2)
    after = by_worker(gunicorn, 60)
    assert {pid for pid, _ in after} == denied_by
    # The limit counts afresh in Redis: 2 allowed in all, by whichever workers.
    assert sum(status == 200 for _, status in after) == 2, after
