"""Configuration errors are found when the app starts, in every
integration, and never answered as an outage: a password or ACL Redis
refuses (issue 30, item 12), a server without the module (item 13)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import flask
import httpx
import pytest
import redis
import redis.asyncio
from fastapi import Depends, FastAPI
from redis.exceptions import AuthenticationError, NoPermissionError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route

from redis_ratelimit import FixedWindow, ModuleNotLoadedError
from redis_ratelimit.web import RateLimitMiddleware, RateLimitWSGIMiddleware
from redis_ratelimit.web.fastapi import RateLimit

from .apps import hello
from .servers import Server, free_port
from .test_frameworks import django_settings
from .test_rules import lifespan_startup

__all__ = ["django_settings"]

LIMIT = FixedWindow(3, "1h")


@pytest.fixture(scope="module")
def locked() -> Iterator[Server]:
    s = Server(args=("--requirepass", "s3cret"))
    admin = redis.Redis(port=s.port, password="s3cret")
    admin.acl_setuser("reader", enabled=True, passwords=["+pw"], keys=["*"], commands=["+ping"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def bare() -> Iterator[Server]:
    s = Server(module=False)
    yield s
    s.stop()


#: Clients Redis refuses: no password, a wrong one, a user without the rights.
REFUSED: dict[str, tuple[dict[str, Any], type[Exception]]] = {
    "no password": ({}, AuthenticationError),
    "wrong password": ({"password": "nope"}, AuthenticationError),
    "no rights": ({"username": "reader", "password": "pw"}, NoPermissionError),
}


def flask_view(client: redis.Redis) -> Any:
    from redis_ratelimit.web.flask import rate_limit

    return rate_limit(client, LIMIT)(lambda: "x")


def django_view(client: redis.Redis) -> Any:
    from redis_ratelimit.web.django import rate_limit

    return rate_limit(client, LIMIT)(lambda request: None)


def django_middleware(client: redis.Redis) -> Any:
    from django.test import override_settings

    from redis_ratelimit.web.django import RateLimitMiddleware as DjangoMiddleware

    with override_settings(REDIS_RATELIMIT={"redis": client, "limits": LIMIT}):
        return DjangoMiddleware(lambda request: None)


def wsgi_middleware(client: redis.Redis) -> Any:
    return RateLimitWSGIMiddleware(lambda e, s: [], redis=client, limits=LIMIT)


SYNC_DOORS: dict[str, Callable[[redis.Redis], Any]] = {
    "WSGI middleware": wsgi_middleware,
    "Flask decorator": flask_view,
    "Django middleware": django_middleware,
    "Django decorator": django_view,
}


@pytest.mark.parametrize("door", SYNC_DOORS)
@pytest.mark.parametrize("who", REFUSED)
def test_refused_credentials_stop_every_sync_integration_at_startup(
    locked: Server, django_settings: None, door: str, who: str
) -> None:
    kwargs, error = REFUSED[who]
    with pytest.raises(error):
        SYNC_DOORS[door](redis.Redis(port=locked.port, **kwargs))


@pytest.mark.anyio
@pytest.mark.parametrize("who", REFUSED)
async def test_refused_credentials_stop_the_asgi_app_at_startup(locked: Server, who: str) -> None:
    kwargs, error = REFUSED[who]
    client = redis.asyncio.Redis(port=locked.port, **kwargs)
    app = Starlette(
        routes=[Route("/", hello)],
        middleware=[Middleware(RateLimitMiddleware, redis=client, limits=LIMIT)],
    )
    with pytest.raises(error):
        await lifespan_startup(app)


def test_refused_credentials_never_let_requests_through_unlimited(
    locked: Server, caplog: pytest.LogCaptureFixture
) -> None:
    # Not validated at start (validate=False): every request still fails
    # loudly, fail_open or not, and the breaker does not take it for an outage.
    for fail_open in (True, False):
        app = flask.Flask(__name__)
        app.route("/")(lambda: "x")
        app.wsgi_app = RateLimitWSGIMiddleware(  # type: ignore[method-assign]
            app.wsgi_app,
            redis=redis.Redis(port=locked.port, password="nope"),
            limits=LIMIT,
            validate=False,
            fail_open=fail_open,
            scope=f"open-{fail_open}",
        )
        http = app.test_client()
        for _ in range(20):
            with pytest.raises(AuthenticationError):
                http.get("/")
    assert caplog.text.count("configuration error, not an outage") == 2  # once per rule


@pytest.mark.anyio
async def test_the_fastapi_dependency_never_passes_a_request_on_refused_credentials(
    locked: Server, caplog: pytest.LogCaptureFixture
) -> None:
    app = FastAPI()
    client = redis.asyncio.Redis(port=locked.port, password="nope")

    @app.get("/", dependencies=[Depends(RateLimit(client, LIMIT))])
    async def root() -> str:
        return "x"

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        codes = [(await http.get("/")).status_code for _ in range(20)]
    assert codes == [500] * 20
    assert caplog.text.count("configuration error, not an outage") == 1


@pytest.mark.parametrize("door", SYNC_DOORS)
def test_a_server_without_the_module_stops_every_sync_integration_at_startup(
    bare: Server, django_settings: None, door: str
) -> None:
    with pytest.raises(ModuleNotLoadedError):
        SYNC_DOORS[door](redis.Redis(port=bare.port))


@pytest.mark.anyio
@pytest.mark.parametrize(("fail_open", "code"), [(True, 200), (False, 503)])
async def test_the_fastapi_dependency_on_a_server_without_the_module_says_so_once(
    bare: Server, caplog: pytest.LogCaptureFixture, fail_open: bool, code: int
) -> None:
    # No start to check at: the first request finds it, logs it at ERROR
    # once, and the rule's fail mode answers (not a 500 per request).
    app = FastAPI()
    client = redis.asyncio.Redis(port=bare.port)

    @app.get("/", dependencies=[Depends(RateLimit(client, LIMIT, fail_open=fail_open))])
    async def root() -> str:
        return "x"

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        codes = [(await http.get("/")).status_code for _ in range(5)]
    assert codes == [code] * 5
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1
    assert "cannot run on this server" in errors[0].getMessage()


def test_gunicorn_does_not_start_with_a_password_redis_refuses(locked: Server) -> None:
    # Its workers import the app, which builds the WSGI middleware, which asks
    # the server: every worker fails to boot, and gunicorn exits, instead of
    # serving every request unlimited with a warning every 10 s.
    env = {**os.environ, "RL_TEST_REDIS_PORT": str(locked.port)}
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--workers",
            "2",
            "--bind",
            f"127.0.0.1:{free_port()}",
            "tests.gunicorn_app:app",
        ],
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert process.returncode != 0
    log = process.stderr.decode()
    assert "AuthenticationError" in log
    assert "Worker failed to boot" in log
