"""What the web adapters share: the request as a key function sees it, the
key functions, and the rule that turns a request into a command and a
decision into a response.

The ASGI middleware, the WSGI middleware and the Flask decorator differ
only in how they read a request, send a command and write a response;
everything they decide is decided here, once.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from redis.exceptions import ClusterDownError, OutOfMemoryError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import commands
from ..commands import Command
from ..decision import Decision
from ..limits import Limit
from ..units import Duration

logger = logging.getLogger("redis_ratelimit")

#: The errors that mean Redis cannot decide: it cannot be reached (down,
#: refused, timed out, cluster without a primary for the slot), or it is at
#: `maxmemory` and refuses to create the key (``OOM ...``: the module keeps
#: deciding for existing keys, but a client it never saw needs a new one).
#: These, and only these, are answered by the fail-open/fail-closed choice.
#: Any other error reply (a bad limit, a WRONGTYPE key) is a bug to see, and
#: is raised.
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, ClusterDownError, OutOfMemoryError)


@dataclass(frozen=True)
class Request:
    """A request, as a key function sees it, whatever the framework."""

    method: str
    path: str
    #: Header fields by lower-case name; repeated fields joined by ", ".
    headers: Mapping[str, str]
    #: The address of the peer that opened the connection (never a header:
    #: anyone can send one), or None when the server does not say.
    client: str | None
    #: The authenticated user's identity, if the app's authentication set
    #: one: ``scope["user"].identity`` (Starlette's AuthenticationMiddleware)
    #: under ASGI, ``REMOTE_USER`` under WSGI.
    user: str | None
    #: The ASGI scope or the WSGI environ, for anything else.
    raw: Mapping[str, Any] = field(repr=False)


#: Gives the identity a request is limited by, or None to not limit it
#: (a health check, an internal caller).
KeyFunc = Callable[[Request], str | None]

#: Told of each request a shadow rule would have denied (it was let through).
ShadowHook = Callable[[Request, Decision], None]


def client_ip(request: Request) -> str | None:
    """The peer's address. Behind a proxy this is the proxy's: see
    `forwarded_ip`."""
    return None if request.client is None else "ip:" + request.client


def forwarded_ip(trusted_proxies: int = 1, header: str = "X-Forwarded-For") -> KeyFunc:
    """The client address as your own proxies saw it: the entry
    `trusted_proxies` places from the right of `header`.

    Only for apps that sit behind that many proxies which each append to the
    header: the entries further left are whatever the client chose to send,
    so trusting them lets anyone pick a fresh identity per request. With
    fewer entries than proxies (a request that bypassed them), the peer
    address is used.
    """
    if trusted_proxies < 1:
        raise ValueError("trusted_proxies must be at least 1")
    name = header.lower()

    def key(request: Request) -> str | None:
        hops = [h.strip() for h in request.headers.get(name, "").split(",") if h.strip()]
        if len(hops) >= trusted_proxies:
            return "ip:" + hops[-trusted_proxies]
        return client_ip(request)

    return key


def api_key(header: str = "X-Api-Key", fallback: KeyFunc | None = client_ip) -> KeyFunc:
    """The API key in `header`, hashed (a secret does not belong in a Redis
    key name, where ``SCAN`` and ``MONITOR`` show it); `fallback` for a
    request without one (None: do not limit those)."""
    name = header.lower()

    def key(request: Request) -> str | None:
        value = request.headers.get(name)
        if not value:
            return fallback(request) if fallback is not None else None
        return "key:" + hashlib.sha256(value.encode()).hexdigest()[:32]

    return key


def user(fallback: KeyFunc | None = client_ip) -> KeyFunc:
    """The authenticated user (`Request.user`); `fallback` for anonymous
    requests (None: do not limit those)."""

    def key(request: Request) -> str | None:
        if request.user:
            return "user:" + request.user
        return fallback(request) if fallback is not None else None

    return key


@dataclass(frozen=True)
class Response:
    """A response the adapters send instead of the app's."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass(frozen=True)
class Verdict:
    """What to do with one request: send `response` instead of calling the
    app, or call it and add `headers` to its response."""

    headers: list[tuple[str, str]] = field(default_factory=list)
    response: Response | None = None


PASS = Verdict()


class RuleOptions(TypedDict, total=False):
    """`Rule`'s keyword arguments, as the middlewares pass them through."""

    key: KeyFunc
    prefix: str
    scope: str | None
    cost: int | Callable[[Request], int]
    fail_open: bool
    legacy_headers: bool
    ietf_headers: bool
    penalty: Duration | None
    shadow: bool
    on_shadow_denied: ShadowHook | None


class Rule:
    """One or several limits on every request the key function names.

    Several limits are checked with one ``RL.ALL`` (all or nothing), their
    keys sharing the identity as hash tag so a cluster takes them:
    ``<prefix>:{<identity>}:<policy name>`` (with ``<scope>:`` before the
    name when given). ``fail_open``: when Redis cannot be reached, let
    requests through (True, the default: an outage of the limiter should not
    become an outage of the API) or answer 503 (False).

    ``penalty``: a denial locks the identity out for this long (the module's
    ``PENALTY``). ``shadow``: try the rule without enforcing it (``SHADOW``):
    nothing is ever denied or taken, and each request it would have denied
    reaches the app all the same, after ``on_shadow_denied(request,
    decision)`` is called (by default, a line at INFO on the
    ``redis_ratelimit`` logger).
    """

    def __init__(
        self,
        limits: Limit | Sequence[Limit],
        *,
        key: KeyFunc = client_ip,
        prefix: str = "rl",
        scope: str | None = None,
        cost: int | Callable[[Request], int] = 1,
        fail_open: bool = True,
        legacy_headers: bool = True,
        ietf_headers: bool = True,
        penalty: Duration | None = None,
        shadow: bool = False,
        on_shadow_denied: ShadowHook | None = None,
    ) -> None:
        self.limits = (limits,) if isinstance(limits, Limit) else tuple(limits)
        if not self.limits:
            raise ValueError("give at least one limit")
        names = [limit.policy().name for limit in self.limits]
        if len(set(names)) != len(names):
            raise ValueError(
                f"the limits' names {names} must differ: each names its Redis key "
                "and its RateLimit-Policy item (give each a name=...)"
            )
        self.names = names
        self.key = key
        self.prefix = prefix
        self.scope = scope
        self.cost = cost
        self.fail_open = fail_open
        self.legacy_headers = legacy_headers
        self.ietf_headers = ietf_headers
        self.penalty = penalty
        self.shadow = shadow
        self.on_shadow_denied = on_shadow_denied or _log_shadow_denial
        self._outages = _OutageLog()

    def command(self, request: Request) -> Command[Decision] | None:
        """The check for `request`, or None when it is not limited."""
        identity = self.key(request)
        if identity is None:
            return None
        cost = self.cost(request) if callable(self.cost) else self.cost
        base = f"{self.prefix}:{{{identity}}}:" + (f"{self.scope}:" if self.scope else "")
        keys = [base + name for name in self.names]
        options = commands.CheckOptions(cost=cost, penalty=self.penalty, shadow=self.shadow)
        if len(self.limits) == 1:
            return commands.check(keys[0], self.limits[0], **options)
        return commands.check_all(zip(keys, self.limits, strict=True), **options)

    def verdict(self, decision: Decision, request: Request) -> Verdict:
        """Denied: 429 with the headers (``Retry-After`` unless the request
        can never pass). Allowed: the app's response, with the headers;
        a shadow denial is told to `on_shadow_denied` first."""
        headers = list(decision.headers(legacy=self.legacy_headers, ietf=self.ietf_headers).items())
        if decision.allowed:
            if decision.shadow_denied:
                self.on_shadow_denied(request, decision)
            return Verdict(headers=headers)
        retry = decision.retry_after_header()
        text = (
            f"Too many requests: retry in {retry} s.\n"
            if retry is not None
            else "Too many requests: this request is larger than the limit and can never pass.\n"
        )
        return Verdict(response=_text_response(429, "Too Many Requests", text, headers))

    def unreachable(self, error: Exception) -> Verdict:
        """Redis could not decide (unreachable, or out of memory for a new
        key): pass, or 503, as `fail_open` says."""
        self._outages.note(error, self.fail_open)
        if self.fail_open:
            return PASS
        text = "Service unavailable: the rate limiter cannot be reached.\n"
        return Verdict(response=_text_response(503, "Service Unavailable", text, []))


def _log_shadow_denial(request: Request, decision: Decision) -> None:
    retry = decision.retry_after
    logger.info(
        "shadow rate limit would have denied %s %s (%s)",
        request.method,
        request.path,
        "it can never pass" if retry is None else f"retry in {retry.total_seconds():g} s",
    )


def _text_response(status: int, reason: str, text: str, headers: list[tuple[str, str]]) -> Response:
    body = text.encode()
    return Response(
        status,
        reason,
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
            *headers,
        ],
        body,
    )


class _OutageLog:
    """Logs that Redis is unreachable at most every `interval_s`, with how
    many requests met it since: one line per request would flood the logs
    exactly when they are read."""

    def __init__(self, interval_s: float = 10.0) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._last = -interval_s
        self._count = 0

    def note(self, error: Exception, fail_open: bool) -> None:
        with self._lock:
            self._count += 1
            now = time.monotonic()
            if now - self._last < self.interval_s:
                return
            count, self._count, self._last = self._count, 0, now
        logger.warning(
            "rate limiter cannot ask Redis (%s: %s); %d request(s) %s since the last message",
            type(error).__name__,
            error,
            count,
            "let through" if fail_open else "refused with 503",
        )


def join_headers(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """Header pairs by lower-case name, repeated fields joined by ", "
    (RFC 9110 section 5.3)."""
    headers: dict[str, str] = {}
    for name, value in pairs:
        name = name.lower()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def decide(rule: Rule, request: Request, run: Callable[[Command[Decision]], Decision]) -> Verdict:
    """The verdict on `request`, asking Redis through `run` (a sync
    client's; the ASGI middleware has its own five lines for await)."""
    command = rule.command(request)
    if command is None:
        return PASS
    try:
        decision = run(command)
    except UNREACHABLE as error:
        return rule.unreachable(error)
    return rule.verdict(decision, request)
