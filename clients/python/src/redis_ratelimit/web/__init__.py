"""Rate limiting for web apps: the ASGI middleware, the WSGI middleware,
the Flask decorator (`redis_ratelimit.web.flask`, which needs Flask), and
what they share: the key functions and the `Rule`."""

from .asgi import RateLimitMiddleware
from .core import Request, Rule, api_key, client_ip, forwarded_ip, user
from .wsgi import RateLimitWSGIMiddleware

__all__ = [
    "RateLimitMiddleware",
    "RateLimitWSGIMiddleware",
    "Request",
    "Rule",
    "api_key",
    "client_ip",
    "forwarded_ip",
    "user",
]
