"""Rate limiting for WSGI apps: a middleware for any WSGI app (Flask:
``app.wsgi_app = RateLimitWSGIMiddleware(app.wsgi_app, ...)``), and the
Flask decorator in `redis_ratelimit.web.flask` for one view at a time."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from redis import Redis
from redis.cluster import RedisCluster
from typing_extensions import Unpack

from ..kinds import require_sync
from .core import (
    Limits,
    Request,
    Rule,
    RuleOptions,
    build_rule,
    claim_keys,
    decide,
    layered_headers,
    restamp,
)
from .guard import sync_guard

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]


def wsgi_request(environ: Mapping[str, Any]) -> Request:
    """The request of a WSGI environ (PEP 3333: headers are ``HTTP_*``,
    but the body's type and length are not)."""
    headers = {
        name[5:].replace("_", "-").lower(): str(value)
        for name, value in environ.items()
        if name.startswith("HTTP_")
    }
    for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(name):
            headers[name.replace("_", "-").lower()] = str(environ[name])
    return Request(
        method=str(environ.get("REQUEST_METHOD", "")),
        path=str(environ.get("PATH_INFO", "")),
        headers=headers,
        client=environ.get("REMOTE_ADDR") or None,
        user=environ.get("REMOTE_USER") or None,
        raw=environ,
    )


class RateLimitWSGIMiddleware:
    """Checks every request before the app sees it: a denied one is answered
    ``429 Too Many Requests`` with the headers, an allowed one reaches the
    app and its response gets the headers. Give `rule` (a `Rule`) or
    `limits` and `Rule`'s options (`redis_ratelimit.web.Rule`)."""

    def __init__(
        self,
        app: WSGIApp,
        *,
        redis: Redis | RedisCluster,
        limits: Limits | None = None,
        rule: Rule | None = None,
        validate: bool = True,
        **options: Unpack[RuleOptions],
    ) -> None:
        require_sync(redis, "RateLimitWSGIMiddleware", "RateLimitMiddleware (ASGI)")
        self.app = app
        self.rule = build_rule(limits, rule, options)
        self.guard = sync_guard(redis, self.rule.timeout, self.rule.cooldown)
        self.cluster = isinstance(redis, RedisCluster)
        if self.rule.scope is None:  # one given on purpose may be shared on purpose
            claim_keys(redis, self.rule, f"RateLimitWSGIMiddleware at {id(self):#x}")
        if validate:  # the server's word on the rule, now: `Rule.check_at_startup`
            self.rule.check_at_startup(self.guard.limiter.redis)

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        verdict = decide(self.rule, wsgi_request(environ), self.guard.run, self.cluster)
        if verdict.response is not None:
            response = verdict.response
            headers = restamp(response.headers, layered_headers(environ))
            start_response(f"{response.status} {response.reason}", headers)
            return [response.body]

        def start_with_headers(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            # Every rule's decision on this request, this one's and those
            # of the app's own (a view's decorator), as one set of fields.
            return start_response(status, restamp(headers, layered_headers(environ)), exc_info)

        return self.app(environ, start_with_headers)
