"""The app `test_production` serves with uvicorn on a unix socket, as it is
deployed behind nginx: a Starlette app behind the ASGI middleware, Redis on
the port in ``RL_TEST_REDIS_PORT``."""

from __future__ import annotations

import os

import redis.asyncio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from redis_ratelimit import FixedWindow
from redis_ratelimit.web import RateLimitMiddleware


async def hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


app = Starlette(
    routes=[Route("/hello", hello)],
    middleware=[
        Middleware(
            RateLimitMiddleware,
            redis=redis.asyncio.Redis(port=int(os.environ["RL_TEST_REDIS_PORT"])),
            limits=FixedWindow(10, "1h"),
        )
    ],
)
