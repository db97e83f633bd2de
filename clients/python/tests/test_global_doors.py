"""A leased global limit behind the doors an app is deployed with: a server
without the module, credentials Redis refuses, an ACL without the command.
Found by running the WSGI middleware under gunicorn with a `GlobalLimit`
as its only limit: on a server without the module the app started and
answered every request 500, and the refill thread died on the first
refused grant."""

from __future__ import annotations

import logging
import threading

import pytest
import redis
from redis.exceptions import AuthenticationError

from redis_ratelimit import GlobalLimit, ModuleNotLoadedError, TokenBucket
from redis_ratelimit.web import RateLimitWSGIMiddleware

from .servers import Server
from .test_startup import bare, locked

__all__ = ["bare", "locked"]  # the servers of test_startup: no module; a password

LIMIT = TokenBucket(100, 100)


def _hello(environ: object, start_response: object) -> list[bytes]:
    return []


def test_a_rule_of_only_a_global_limit_is_checked_when_the_app_starts(
    bare: Server, locked: Server
) -> None:
    # The start-up peek covers the global limit's key: no module, or a
    # password Redis refuses, stops the app instead of serving it.
    cases = [
        (redis.Redis(port=bare.port), ModuleNotLoadedError),
        (redis.Redis(port=locked.port, password="nope"), AuthenticationError),
    ]
    for client, error in cases:
        gl = GlobalLimit(client, "g:start", LIMIT)
        try:
            with pytest.raises(error):
                RateLimitWSGIMiddleware(_hello, redis=client, limits=gl)
        finally:
            gl.close()


def _refill_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "GlobalLimit")


@pytest.mark.parametrize("where", ["no module", "no rights"])
def test_a_refused_grant_is_a_failure_never_a_raise_nor_the_end_of_the_refill_thread(
    bare: Server, locked: Server, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = (
        redis.Redis(port=bare.port)
        if where == "no module"
        else redis.Redis(port=locked.port, username="reader", password="pw")
    )
    before = _refill_threads()
    with caplog.at_level(logging.WARNING):
        for fail_open in (True, False):
            gl = GlobalLimit(client, f"g:{where}:{fail_open}", LIMIT, fail_open=fail_open)
            try:
                answers = [gl.allow() for _ in range(50)]
                decision = gl.check()
                # The fail mode answers every request; nothing raised.
                assert answers == [fail_open] * 50
                assert decision.allowed is fail_open
                # What Redis holds is unknown while it fails: a denial does
                # not tell the client the limit's whole quota is left.
                assert decision.remaining == 0
                # The refill thread is still there to ask again.
                assert _refill_threads() == before + 1
                assert gl.stats().calls >= 1
            finally:
                gl.close()
    assert "Redis failed" in caplog.text
