"""Django: a middleware for every request and a decorator for one view.

The middleware reads ``settings.REDIS_RATELIMIT``, a dict of ``redis`` (a
sync ``redis.Redis`` or ``RedisCluster``) and either ``rule`` (a `Rule`) or
``limits`` and `Rule`'s options::

    MIDDLEWARE = [..., "redis_ratelimit.web.django.RateLimitMiddleware"]
    REDIS_RATELIMIT = {"redis": redis.Redis(...), "limits": "100 per minute"}

Django's ``request.META`` is a WSGI environ, so the key functions see the
same `Request` as under any WSGI server.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from redis import Redis
from redis.cluster import RedisCluster
from typing_extensions import Unpack

from ..kinds import require_sync
from .core import Limits, Response, Rule, RuleOptions, claim_keys, decide, layered_headers
from .flask import view_scope
from .guard import sync_guard
from .wsgi import wsgi_request

F = TypeVar("F", bound=Callable[..., Any])


def _response(r: Response) -> HttpResponse:
    response = HttpResponse(r.body, status=r.status)
    for name, value in r.headers:
        response[name] = value
    return response


def _with_headers(response: HttpResponse, request: HttpRequest) -> HttpResponse:
    """`response` with the fields of every rule that decided on `request`
    (this one's, and a view decorator's under the middleware), each field
    once, in place of those an inner layer set."""
    for name, value in layered_headers(request.META):
        response[name] = value
    return response


class RateLimitMiddleware:
    """Checks every request before the view: a denied one is answered 429
    with the headers, an allowed one's response gets them."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        conf = dict(getattr(settings, "REDIS_RATELIMIT", {}))
        redis = conf.pop("redis", None)
        require_sync(redis, "settings.REDIS_RATELIMIT['redis']", "an ASGI middleware")
        rule = conf.pop("rule", None)
        validate = conf.pop("validate", True)
        self.rule = rule if isinstance(rule, Rule) else Rule(conf.pop("limits"), **conf)
        self.guard = sync_guard(redis, self.rule.timeout, self.rule.cooldown)
        self.cluster = isinstance(redis, RedisCluster)
        self.get_response = get_response
        if self.rule.scope is None:  # one given on purpose may be shared on purpose
            claim_keys(redis, self.rule, f"Django's RateLimitMiddleware at {id(self):#x}")
        if validate:  # Django makes its middleware when the app starts
            self.rule.check_at_startup(self.guard.limiter.redis)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        verdict = decide(self.rule, wsgi_request(request.META), self.guard.run, self.cluster)
        if verdict.response is not None:
            return _response(verdict.response)
        return _with_headers(self.get_response(request), request)


def rate_limit(
    redis: Redis | RedisCluster, limits: Limits, **options: Unpack[RuleOptions]
) -> Callable[[F], F]:
    """Limits one view (a function view; for a class-based one, decorate
    ``as_view()``'s result). `scope` defaults to the view's module and name."""
    require_sync(redis, "rate_limit", "an ASGI middleware")
    Rule(limits, **options)  # a wrong argument fails here, at import
    cluster = isinstance(redis, RedisCluster)

    def decorate(view: F) -> F:
        rule = Rule(limits, **(RuleOptions(scope=view_scope(view)) | options))
        guard = sync_guard(redis, rule.timeout, rule.cooldown)
        if "scope" not in options:
            claim_keys(redis, rule, f"@rate_limit at {id(rule):#x} on {view_scope(view)}")
        rule.check_at_startup(guard.limiter.redis)  # when the view is defined

        @functools.wraps(view)
        def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            verdict = decide(rule, wsgi_request(request.META), guard.run, cluster)
            if verdict.response is not None:
                return _response(verdict.response)
            return _with_headers(view(request, *args, **kwargs), request)

        return cast(F, limited)

    return decorate
