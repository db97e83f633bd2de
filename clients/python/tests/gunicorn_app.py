"""The app `test_reset` serves with gunicorn's sync workers: a Flask app
behind the WSGI middleware (a login-style limit with a penalty), each
response saying which worker made it (``X-Worker``). Redis on the port in
``RL_TEST_REDIS_PORT``."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import flask
import redis

from redis_ratelimit import FixedWindow
from redis_ratelimit.web import RateLimitWSGIMiddleware

flask_app = flask.Flask(__name__)


@flask_app.route("/login")
def login() -> str:
    return "welcome"


limited = RateLimitWSGIMiddleware(
    flask_app.wsgi_app,
    redis=redis.Redis(port=int(os.environ["RL_TEST_REDIS_PORT"])),
    limits=FixedWindow(2, "1h"),
    penalty="1h",
)


def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        return start_response(status, [*headers, ("X-Worker", str(os.getpid()))], exc_info)

    return limited(environ, start)
