"""Rate limiting for ASGI apps (Starlette, FastAPI, any ASGI framework).

A plain ASGI middleware, so it needs no framework: with Starlette or
FastAPI, ``app.add_middleware(RateLimitMiddleware, redis=..., limits=...)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from typing_extensions import Unpack

from ..kinds import require_async
from .core import (
    REFUSED_CREDENTIALS,
    UNREACHABLE,
    Deciding,
    Limits,
    Request,
    Response,
    Rule,
    RuleOptions,
    SpendGlobals,
    Verdict,
    build_rule,
    claim_keys,
    join_headers,
    layered_headers,
    logger,
)
from .guard import AsyncGuard, async_guard

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def asgi_request(scope: Mapping[str, Any]) -> Request:
    """The request of an ASGI ``http`` scope."""
    raw_headers = scope.get("headers", ())
    headers = join_headers([(n.decode("latin-1"), v.decode("latin-1")) for n, v in raw_headers])
    client = scope.get("client")
    user = scope.get("user")  # set by Starlette's AuthenticationMiddleware, if installed
    identity = getattr(user, "identity", None) if getattr(user, "is_authenticated", False) else None
    return Request(
        method=scope.get("method", ""),
        path=scope.get("path", ""),
        headers=headers,
        client=client[0] if client else None,
        user=identity or None,
        raw=scope,
    )


async def decide_async(
    rule: Rule, request: Request, guard: AsyncGuard, cluster: bool, scope: str | None = None
) -> Verdict:
    """`core.decide`, awaiting Redis and the global limits (`Deciding`)."""
    deciding = Deciding(rule, request, cluster, scope)
    step = deciding.start()
    while not isinstance(step, Verdict):
        try:
            if isinstance(step, SpendGlobals):
                answer: Any = await rule.spend_globals_async(step.pending)
            else:
                answer = await guard.run(step)
        except Exception as error:
            step = deciding.fail(error)
        else:
            step = deciding.answer(answer)
    return step


class RateLimitMiddleware:
    """Checks every HTTP request before the app sees it: a denied one is
    answered ``429 Too Many Requests`` with the headers, an allowed one
    reaches the app and its response gets the headers. Give `rule` (a
    `Rule`, built when the app's module is imported, so its errors show
    then) or `limits` and `Rule`'s options (`redis_ratelimit.web.Rule`)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        redis: Redis | RedisCluster,
        limits: Limits | None = None,
        rule: Rule | None = None,
        validate: bool = True,
        **options: Unpack[RuleOptions],
    ) -> None:
        require_async(redis, "RateLimitMiddleware", "RateLimitWSGIMiddleware")
        self.app = app
        self.redis = redis
        #: Ask the server about the rule (`Rule.validate`) at the lifespan
        #: startup: a limit it refuses fails the start (uvicorn
        #: ``--lifespan on`` then exits); Redis unreachable is only logged.
        self.validate = validate
        self._validated = False
        self.rule = build_rule(limits, rule, options)
        self.guard = async_guard(redis, self.rule.timeout, self.rule.cooldown)
        self.cluster = isinstance(redis, RedisCluster)
        if self.rule.scope is None:  # one given on purpose may be shared on purpose
            claim_keys(redis, self.rule, f"RateLimitMiddleware at {id(self):#x}")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" and self.validate:
            await self.app(scope, self._validating(receive), send)
            return
        if scope["type"] != "http":  # websocket, lifespan
            await self.app(scope, receive, send)
            return
        verdict = await self.decide(asgi_request(scope))
        if verdict.response is not None:
            await send_response(send, verdict.response)
            return
        await self.app(scope, receive, headers_writer(scope, send))

    def _validating(self, receive: Receive) -> Receive:
        async def receive_checked() -> Message:
            message = await receive()
            if message.get("type") == "lifespan.startup" and not self._validated:
                self._validated = True
                try:
                    # Through the guard's client: short timeouts, no retries.
                    await asyncio.wait_for(self.rule.validate(self.guard.on_this_loop().redis), 2)
                except REFUSED_CREDENTIALS:
                    raise  # a wrong password is not an outage: the app does not start
                except (*UNREACHABLE, asyncio.TimeoutError) as error:
                    logger.warning(
                        "rate limit %s: not validated at startup, Redis cannot be asked (%s)",
                        self.rule.names,
                        error,
                    )
            return message

        return receive_checked

    async def decide(self, request: Request) -> Verdict:
        """The verdict on `request`."""
        return await decide_async(self.rule, request, self.guard, self.cluster)


#: Set in the scope by whatever will write the rate-limit headers of every
#: rule on the response (`headers_writer`): a route dependency need not
#: warn that its own are lost.
HEADERS_WRITTEN = "redis_ratelimit.headers_written"


def headers_writer(scope: Scope, send: Send) -> Send:
    """`send`, writing on the response the fields of every rule that
    decided on this request (this middleware's, a route dependency's,
    decided later) as one set, each field once, over any an inner layer
    wrote."""
    scope[HEADERS_WRITTEN] = True

    async def send_with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            extra = [
                (name.lower().encode("latin-1"), value.encode("latin-1"))
                for name, value in layered_headers(scope)
            ]
            if extra:
                names = {name for name, _ in extra}
                message = dict(message)
                kept = [(n, v) for n, v in message.get("headers", ()) if n.lower() not in names]
                message["headers"] = [*kept, *extra]
        await send(message)

    return send_with_headers


async def send_response(send: Send, response: Response) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": response.status,
            "headers": [
                (n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in response.headers
            ],
        }
    )
    await send({"type": "http.response.body", "body": response.body})
