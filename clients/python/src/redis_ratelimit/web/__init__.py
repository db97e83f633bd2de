"""Rate limiting for web apps: the ASGI middleware (`.asgi`), the WSGI
middleware (`.wsgi`), the Flask decorator (`.flask`, needs Flask), and what
they share: key functions and the `Rule`."""

from .core import Request, Rule, api_key, client_ip, forwarded_ip, user

__all__ = ["Request", "Rule", "api_key", "client_ip", "forwarded_ip", "user"]
