"""A Flask decorator: limits on one view.

Each decorated view counts apart (its name is in the Redis keys), unless
views are given the same `scope` to share their counts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import flask
from redis import Redis
from redis.cluster import RedisCluster
from typing_extensions import Unpack

from ..client import RateLimiter
from ..limits import Limit
from .core import Rule, RuleOptions, decide
from .wsgi import wsgi_request

F = TypeVar("F", bound=Callable[..., Any])


def rate_limit(
    redis: Redis | RedisCluster,
    limits: Limit | Sequence[Limit],
    **options: Unpack[RuleOptions],
) -> Callable[[F], F]:
    """Limits the decorated view: a denied request gets ``429 Too Many
    Requests`` with the headers and the view does not run; an allowed one
    runs it and its response gets the headers. Put it under ``@app.route``.
    The arguments are `Rule`'s (`redis_ratelimit.web.Rule`); `scope`
    defaults to the view's name."""
    limiter = RateLimiter(redis)

    def decorate(view: F) -> F:
        rule = Rule(limits, **(RuleOptions(scope=view.__name__) | options))

        @functools.wraps(view)
        def limited(*args: Any, **kwargs: Any) -> Any:
            verdict = decide(rule, wsgi_request(flask.request.environ), limiter.run)
            if verdict.response is not None:
                r = verdict.response
                return flask.Response(r.body, status=f"{r.status} {r.reason}", headers=r.headers)
            if verdict.headers:

                @flask.after_this_request
                def add_headers(response: flask.Response) -> flask.Response:
                    response.headers.extend(verdict.headers)
                    return response

            return view(*args, **kwargs)

        return cast(F, limited)

    return decorate
