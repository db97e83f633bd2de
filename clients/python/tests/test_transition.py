"""A cluster in transition is an outage while it lasts, and a waiter the
server lets go is told so by name (issue 30, item 16)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import flask
import pytest
import redis
from redis.cluster import RedisCluster

from redis_ratelimit import FixedWindow, RateLimiter, TokenBucket, UnblockedError
from redis_ratelimit.web import RateLimitWSGIMiddleware, Rule

from .servers import Cluster, Server

IDENTITY = "ip:10.0.0.1"
TIERS = [TokenBucket(50, 1, name="a"), FixedWindow(100, "1h", name="b")]
KEYS = [f"rl:{{{IDENTITY}}}:{t.name}" for t in TIERS]


def node_id(node: redis.Redis) -> str:
    return str(node.execute_command("CLUSTER", "MYID").decode())  # type: ignore[no-untyped-call]


@pytest.fixture
def migrating(cluster: Cluster) -> Iterator[tuple[RedisCluster, list[redis.Redis]]]:
    """The slot of IDENTITY halfway through a reshard: one of its two keys
    moved to another node, the other not yet (RL.ALL on both: TRYAGAIN).
    Finished afterwards, so the cluster is whole for the next test."""
    rc = RedisCluster(host="127.0.0.1", port=cluster.port)
    rc.flushall()
    nodes = [redis.Redis(port=n.port) for n in cluster.nodes]
    slot = rc.keyslot(KEYS[0])  # type: ignore[no-untyped-call]
    owner = rc.get_node_from_key(KEYS[0]).port  # type: ignore[no-untyped-call]
    source = next(n for n in nodes if n.get_connection_kwargs()["port"] == owner)
    target = next(n for n in nodes if n is not source)
    RateLimiter(rc).check_all([(k, t) for k, t in zip(KEYS, TIERS, strict=True)])
    target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(source))  # type: ignore[no-untyped-call]
    source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(target))  # type: ignore[no-untyped-call]
    port = target.get_connection_kwargs()["port"]
    source.execute_command("MIGRATE", "127.0.0.1", port, "", 0, 5000, "KEYS", KEYS[0])  # type: ignore[no-untyped-call]
    try:
        yield rc, [source, target]
    finally:
        source.execute_command("MIGRATE", "127.0.0.1", port, "", 0, 5000, "KEYS", KEYS[1])  # type: ignore[no-untyped-call]
        for n in nodes:
            n.execute_command("CLUSTER", "SETSLOT", slot, "NODE", node_id(target))  # type: ignore[no-untyped-call]
        rc.close()


def test_tryagain_during_a_reshard_is_an_outage_for_the_middleware(
    migrating: tuple[RedisCluster, list[redis.Redis]],
) -> None:
    rc, _ = migrating
    for fail_open, code in ((True, 200), (False, 503)):
        app = flask.Flask(__name__)
        app.route("/")(lambda: "x")
        middleware = RateLimitWSGIMiddleware(
            app.wsgi_app,
            redis=rc,
            rule=Rule(TIERS, key=lambda request: IDENTITY, fail_open=fail_open),
            validate=False,
        )
        app.wsgi_app = middleware  # type: ignore[method-assign]
        http = app.test_client()
        first = http.get("/")  # raised ClusterError ("TTL exhausted") before
        assert first.status_code == code
        assert "X-RateLimit-Limit" not in first.headers
        # The breaker counted it: the next requests do not ask the cluster.
        assert not middleware.guard.breaker.closed
        again = time.monotonic()
        assert [http.get("/").status_code for _ in range(20)] == [code] * 20
        assert time.monotonic() - again < 0.2
        middleware.guard.breaker.succeeded()  # the next loop's middleware shares the guard


def test_a_waiter_the_server_lets_go_gets_a_typed_error(server: Server) -> None:
    limiter = RateLimiter(redis.Redis(port=server.port, socket_timeout=10))
    admin = redis.Redis(port=server.port)
    admin.flushall()
    assert limiter.acquire("slot", 1, "10s").allowed
    caught: list[BaseException] = []

    def wait() -> None:
        try:
            limiter.acquire("slot", 1, "10s", block=5)
        except BaseException as error:
            caught.append(error)

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        # Blocked ("b"), not only last seen running RL.ACQUIRE: the pool's
        # one connection ran the first acquire before the waiter's.
        blocked = [
            c
            for c in admin.client_list()
            if c.get("cmd") == "rl.acquire" and "b" in c.get("flags", "")
        ]
        if blocked:
            break
        time.sleep(0.02)
    # What a failover does to every waiter, done by hand.
    admin.execute_command("CLIENT", "UNBLOCK", blocked[0]["id"], "ERROR")  # type: ignore[no-untyped-call]
    waiter.join(5)
    assert len(caught) == 1
    assert isinstance(caught[0], UnblockedError), repr(caught[0])
    assert "UNBLOCKED" in str(caught[0])
