"""Rate limiting for web apps: the ASGI middleware, the WSGI middleware,
the FastAPI dependency (`redis_ratelimit.web.fastapi`), the Flask decorator
(`redis_ratelimit.web.flask`), the Django middleware and decorator
(`redis_ratelimit.web.django`), each of those three needing its framework,
and what they share: the key functions, `By`, and the `Rule`."""

from .asgi import RateLimitMiddleware
from .core import (
    MISSING,
    By,
    Request,
    Rule,
    api_key,
    client_ip,
    client_subnet,
    exempt_methods,
    exempt_paths,
    forwarded_ip,
    ip_identity,
    problem_response,
    reset,
    user,
)
from .wsgi import RateLimitWSGIMiddleware

__all__ = [
    "MISSING",
    "By",
    "RateLimitMiddleware",
    "RateLimitWSGIMiddleware",
    "Request",
    "Rule",
    "api_key",
    "client_ip",
    "client_subnet",
    "exempt_methods",
    "exempt_paths",
    "forwarded_ip",
    "ip_identity",
    "problem_response",
    "reset",
    "user",
]
