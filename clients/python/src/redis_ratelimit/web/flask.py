"""A Flask decorator: limits on one view.

Each decorated view counts apart: the default scope is the view's module
and qualified name (``myapp.admin.index``), so two blueprints' ``index``
views never share keys; two decorations that would share keys anyway (two
stacked decorators with the same limit names) are refused when the module
is imported. Views given the same `scope` on purpose share their counts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import flask
from redis import Redis
from redis.cluster import RedisCluster
from typing_extensions import Unpack

from ..kinds import require_sync
from .core import Limits, Rule, RuleOptions, claim_keys, decide, layered_headers
from .guard import sync_guard
from .wsgi import wsgi_request

F = TypeVar("F", bound=Callable[..., Any])


def view_scope(view: Callable[..., Any]) -> str:
    """A view's default scope: its module and qualified name, through any
    decorators (``functools.wraps``' ``__wrapped__``)."""
    inner = _unwrap(view)
    return f"{inner.__module__}.{inner.__qualname__}"


def _unwrap(view: Callable[..., Any]) -> Callable[..., Any]:
    while hasattr(view, "__wrapped__"):
        view = view.__wrapped__
    return view


def rate_limit(
    redis: Redis | RedisCluster,
    limits: Limits,
    **options: Unpack[RuleOptions],
) -> Callable[[F], F]:
    """Limits the decorated view: a denied request gets ``429 Too Many
    Requests`` with the headers and the view does not run; an allowed one
    runs it and its response gets the headers. Put it under ``@app.route``.
    The arguments are `Rule`'s (`redis_ratelimit.web.Rule`); `scope`
    defaults to the view's module and name (`view_scope`)."""
    require_sync(redis, "rate_limit", "an asyncio framework's middleware")
    Rule(limits, **options)  # a wrong argument fails here, at import
    cluster = isinstance(redis, RedisCluster)

    def decorate(view: F) -> F:
        rule = Rule(limits, **(RuleOptions(scope=view_scope(view)) | options))
        guard = sync_guard(redis, rule.timeout, rule.cooldown)
        if "scope" not in options:  # one given on purpose may be shared on purpose
            claim_keys(redis, rule, f"@rate_limit at {id(rule):#x} on {view_scope(view)}")
        rule.check_at_startup(guard.limiter.redis)  # when the view is defined

        @functools.wraps(view)
        def limited(*args: Any, **kwargs: Any) -> Any:
            environ = flask.request.environ
            verdict = decide(rule, wsgi_request(environ), guard.run, cluster)
            if verdict.response is not None:
                r = verdict.response
                return flask.Response(r.body, status=f"{r.status} {r.reason}", headers=r.headers)
            if verdict.headers:

                @flask.after_this_request
                def add_headers(response: flask.Response) -> flask.Response:
                    for name, value in layered_headers(environ):
                        response.headers.set(name, value)  # in place of another layer's
                    return response

            return view(*args, **kwargs)

        return cast(F, limited)

    return decorate
