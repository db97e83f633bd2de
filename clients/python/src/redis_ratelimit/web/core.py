"""What the web adapters share: the request as a key function sees it, the
key functions, and the rule that turns a request into a command and a
decision into a response.

The ASGI and WSGI middlewares, the FastAPI dependency, the Flask and
Django decorators and the Django middleware differ only in how they read a
request, send a command (through `guard`: a breaker and a short budget) and
write a response; everything they decide is decided here, once.
"""

from __future__ import annotations

import gc
import hashlib
import ipaddress
import json
import logging
import socket
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Generator, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, TypedDict, cast, overload

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import commands
from ..async_client import AsyncRateLimiter
from ..cache import DEFAULT_MAX_AGE_S, DenialCache
from ..client import RateLimiter
from ..commands import Command
from ..decision import Decision
from ..errors import InvalidArgumentError, ModuleNotLoadedError
from ..limits import Limit, parse_rates
from ..policies import NamedPolicy, PolicyBook, PolicyInfo, check_command, get_command
from ..units import Duration, check_duration, check_rate
from .guard import DEFAULT_COOLDOWN, DEFAULT_TIMEOUT, IN_TRANSITION, REFUSED

logger = logging.getLogger("redis_ratelimit")

SyncClient = Redis | RedisCluster
AsyncClient = AsyncRedis | AsyncRedisCluster

#: The errors that mean Redis cannot decide: it cannot be reached (down,
#: refused, timed out), its cluster is in transition (`IN_TRANSITION`:
#: TRYAGAIN during a reshard, MOVED loops, CLUSTERDOWN, READONLY after a
#: failover), or it is at
#: `maxmemory` and refuses to create the key (``OOM ...``: the module keeps
#: deciding for existing keys, but a client it never saw needs a new one).
#: These, and only these, are answered by the fail-open/fail-closed choice.
#: Any other error reply (a bad limit, a WRONGTYPE key) is a bug to see, and
#: is raised.
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, *IN_TRANSITION, OutOfMemoryError)

#: The errors that mean Redis refused the limiter's credentials or rights
#: (``NOAUTH``, ``WRONGPASS``, ``NOPERM``): a configuration error, never an
#: outage. redis-py makes some of them connection errors; these are checked
#: first, and always raised: no request passes unlimited because a password
#: is wrong, and none is refused as if Redis were down.
REFUSED_CREDENTIALS = REFUSED

#: The errors that mean the server cannot run the rule at all: the module
#: is not loaded, or it refuses a limit. Found when the app starts where
#: there is a start (`Rule.validate`); on a request (a route dependency, a
#: rule never validated) they are logged at ERROR once per rule and
#: answered as `fail_open` says, like an outage.
UNUSABLE = (ModuleNotLoadedError, InvalidArgumentError)


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


class _Missing(str):
    """The type of `MISSING`."""

    __slots__ = ()


#: What a key function returns when the request does not carry the identity
#: it reads (no peer address: a unix socket, a WSGI server without
#: ``REMOTE_ADDR``). Unlike None, which exempts a request on purpose, the
#: rule limits it under one shared identity (``on_missing_identity``). An
#: empty string counts as missing too.
MISSING: str = _Missing("missing")


#: The IPv6 prefix an address is limited by, unless a key function says
#: otherwise: a /64 is what one subscriber gets at the least (one LAN, one
#: mobile device: RFC 6177, 3GPP), so all of one client's addresses count
#: as one, and no two subscribers are ever merged. A home connection often
#: holds a /56 (256 /64s): for a login form, give ``ipv6_subnet=56``.
DEFAULT_IPV6_SUBNET = 64


def ip_identity(text: str | None, ipv6_subnet: int = DEFAULT_IPV6_SUBNET) -> str:
    """The identity of an address as the server or a proxy wrote it:
    ``ip:<address>``, one spelling per address (``2001:db8::1``,
    ``2001:0db8:0:0::0001`` and ``[2001:db8::1]`` are one; an IPv4 address
    mapped into IPv6 is the IPv4 one; a port after it is dropped), an IPv6
    address as its `ipv6_subnet` (``ip:2001:db8::/64``). `MISSING` for
    nothing, or for what is not an address (a test client's name, a forged
    header entry): never an identity of its own, which anyone could vary."""
    if not text:
        return MISSING
    host = text.strip()
    if host.startswith("["):  # [v6] or [v6]:port
        end = host.find("]")
        host = host[1:end] if end > 0 else ""
    elif host.count(":") == 1:  # v4:port
        host = host.split(":")[0]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return MISSING
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return f"ip:{ip.ipv4_mapped}"
        ip = ipaddress.IPv6Address(int(ip))  # no zone (%eth0)
        if ipv6_subnet < 128:
            net = ipaddress.IPv6Network((ip, ipv6_subnet), strict=False)
            return f"ip:{net.network_address}/{ipv6_subnet}"
    return f"ip:{ip}"


def _check_subnet(ipv6_subnet: object) -> int:
    if isinstance(ipv6_subnet, bool) or not isinstance(ipv6_subnet, int):
        raise TypeError(f"ipv6_subnet must be an int (a prefix length), not {ipv6_subnet!r}")
    if not 1 <= ipv6_subnet <= 128:
        raise ValueError(f"ipv6_subnet must be from 1 to 128, not {ipv6_subnet}")
    return ipv6_subnet


_warned_trust_all = False


def _warn_if_forwarding_trusts_all(request: Request) -> None:
    """Warns once when the server took the peer address from the leftmost
    of several ``X-Forwarded-For`` entries: it trusts every hop (uvicorn's
    ``--forwarded-allow-ips='*'``, ``ProxyFix(x_for=n)`` with too large an
    n), so the address is whatever the client wrote, a fresh identity per
    request for anyone who wants one."""
    global _warned_trust_all
    forwarded = request.headers.get("x-forwarded-for")
    if _warned_trust_all or not forwarded or "," not in forwarded or not request.client:
        return
    hops = [h.strip() for h in forwarded.split(",") if h.strip()]
    if len(hops) >= 2 and hops[0] == request.client and hops[-1] != request.client:
        _warned_trust_all = True
        logger.warning(
            "rate limit: the client address %s is the leftmost of %d X-Forwarded-For entries, "
            "the one the client itself wrote: the server trusts every hop (uvicorn "
            "--forwarded-allow-ips='*'? ProxyFix(x_for=...) above the number of proxies?), "
            "so any client can choose its identity; trust only your own proxies, or use "
            "forwarded_ip(trusted_proxies=n) on the raw peer address",
            request.client,
            len(hops),
        )


def client_ip(request: Request) -> str | None:
    """The peer's address (`ip_identity`: one spelling, IPv6 by its /64);
    `MISSING` when the server gives none, or not an address. Behind a proxy
    this is the proxy's: see `forwarded_ip`."""
    _warn_if_forwarding_trusts_all(request)
    return ip_identity(request.client)


def client_subnet(ipv6_subnet: int = DEFAULT_IPV6_SUBNET) -> KeyFunc:
    """`client_ip` grouping IPv6 addresses by another prefix length
    (``client_subnet(56)``; 128: each address on its own)."""
    _check_subnet(ipv6_subnet)

    def key(request: Request) -> str | None:
        _warn_if_forwarding_trusts_all(request)
        return ip_identity(request.client, ipv6_subnet)

    return key


def forwarded_ip(
    trusted_proxies: int = 1,
    header: str = "X-Forwarded-For",
    *,
    ipv6_subnet: int = DEFAULT_IPV6_SUBNET,
) -> KeyFunc:
    """The client address as your own proxies saw it: the entry
    `trusted_proxies` places from the right of `header` (`ip_identity`:
    IPv6 by its `ipv6_subnet`; an entry that is not an address counts as
    `MISSING`).

    Only for apps that sit behind that many proxies which each append to the
    header: the entries further left are whatever the client chose to send,
    so trusting them lets anyone pick a fresh identity per request. With
    fewer entries than proxies (a request that bypassed them), the peer
    address is used.
    """
    if trusted_proxies < 1:
        raise ValueError("trusted_proxies must be at least 1")
    _check_subnet(ipv6_subnet)
    name = header.lower()

    def key(request: Request) -> str | None:
        hops = [h.strip() for h in request.headers.get(name, "").split(",") if h.strip()]
        if len(hops) >= trusted_proxies:
            return ip_identity(hops[-trusted_proxies], ipv6_subnet)
        return ip_identity(request.client, ipv6_subnet)

    return key


def api_key(
    header: str = "X-Api-Key",
    fallback: KeyFunc | None = client_ip,
    *,
    valid: Callable[[str], bool] | None = None,
) -> KeyFunc:
    """The API key in `header`, hashed (a secret does not belong in a Redis
    key name, where ``SCAN`` and ``MONITOR`` show it); `fallback` for a
    request without one (None: do not limit those).

    Without `valid`, any value is a key, so a client that sends a new
    invented key with each request gets a fresh limit each time: the
    per-address `fallback` never applies to it. Give ``valid(key) -> bool``
    (a set lookup, a cache: it runs on every request) and a request whose
    key is not valid is limited as one without a key, by `fallback` (by
    address, by default); or keep a per-address limit in the same rule
    beside the key's (``By(client_ip, ...)``).
    """
    if valid is not None and not callable(valid):
        raise TypeError(f"valid must be a function of the key, not {valid!r}")
    name = header.lower()

    def key(request: Request) -> str | None:
        value = request.headers.get(name)
        if not value or (valid is not None and not valid(value)):
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

#: Makes the response to a denied request from the request and the decision
#: (whose ``headers()`` it should send); `problem_response` by default.
DenialHook = Callable[[Request, Decision, list[tuple[str, str]]], Response]

#: Says a request is exempt from a rule (True: not limited at all).
ExemptFunc = Callable[[Request], bool]

#: What a rule does with a request whose identity is `MISSING`: limit it
#: under one identity shared by all such requests (``"shared"``, the
#: default), answer it 403 (``"refuse"``), or let it through unlimited
#: (``"exempt"``, which the app has then written on purpose).
MissingIdentity = Literal["shared", "refuse", "exempt"]

#: The identity requests with a `MISSING` one share.
SHARED_IDENTITY = "missing"

#: The IETF draft's problem type for a quota exceeded.
QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"


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
    on_missing_identity: MissingIdentity
    on_denied: DenialHook | None
    exempt: ExemptFunc | None
    denial_cache: bool
    denial_cache_max_age: float
    timeout: float
    cooldown: float


class By:
    """Limits on another identity than the rule's `key`, in the same rule:
    ``Rule([TokenBucket(10, 1), By(api_key(), FixedWindow(1000, "1d"))])``
    checks the peer's bucket and the API key's daily quota at once."""

    def __init__(self, key: KeyFunc, *limits: Limit | NamedPolicy | str) -> None:
        if not callable(key):
            raise TypeError(f"By's first argument is the key function, not {key!r}")
        self.key = key
        self.limits = _limits(limits)


#: A leased global limit (`redis_ratelimit.GlobalLimit` or
#: `AsyncGlobalLimit`) among a rule's limits: one key for every request,
#: decided locally.
GlobalLike = Any

#: What `Rule` takes as its limits.
_Limit = Limit | NamedPolicy | str | By
Limits = _Limit | Sequence[_Limit | GlobalLike] | GlobalLike


def _is_global(item: object) -> bool:
    from ..global_limit import AsyncGlobalLimit, GlobalLimit  # imports web.guard: not at the top

    return isinstance(item, (GlobalLimit, AsyncGlobalLimit))


def _limits(items: Sequence[Limit | NamedPolicy | str]) -> list[Limit | NamedPolicy]:
    out: list[Limit | NamedPolicy] = []
    for item in items:
        if isinstance(item, str):
            out += parse_rates(item)
        elif isinstance(item, (Limit, NamedPolicy)):
            out.append(item)
        else:
            raise TypeError(
                f"a limit must be a Limit (TokenBucket(...), FixedWindow(...), ...), a "
                f'NamedPolicy("plan:pro"), a rate string such as "10/second", or By(key, ...); '
                f"not {type(item).__name__}"
            )
    return out


def _tier_name(limit: Limit | NamedPolicy) -> str:
    return limit.key_name if isinstance(limit, NamedPolicy) else limit.policy().name


def _tier_print(limit: Limit | NamedPolicy) -> Hashable:
    """A limit as the rule's fingerprint holds it: a named policy's
    function by its name, so an app built twice has one fingerprint."""
    if isinstance(limit, NamedPolicy) and callable(limit.name):
        return ("policy", _function_name(limit.name), limit.label)
    return limit


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {value!r}")


@dataclass(frozen=True)
class Tier:
    """One limit of a rule with the key function naming its identity."""

    key: KeyFunc
    limit: Limit | NamedPolicy
    name: str


@dataclass(frozen=True)
class Pending:
    """What a rule asks Redis for one request: `commands`, sent in order
    (one, except on a cluster with several identities: one per identity),
    stopping at the first denial."""

    commands: list[Command[Decision]]
    cache_key: tuple[str | int, ...]
    #: The request's cost, which the rule's global limits spend.
    cost: int = 1
    #: The named policies whose definitions are to be read first
    #: (``RL.POLICY GET``), then `Rule.start` called again.
    reads: list[Command[PolicyInfo | None]] = field(default_factory=list)


class Rule:
    """One or several limits on every request.

    `limits`: `Limit`\\ s (``TokenBucket(10, 1)``), rate strings
    (``"100 per minute; 1000/day"``), `By` groups for other identities, and
    leased global limits (`redis_ratelimit.GlobalLimit`; `AsyncGlobalLimit`
    under ASGI): one limit shared by every request (and every process that
    leases from its key), decided here without a round trip, before the
    others; a request another limit then denies gives its cost back.
    Each limit's Redis key is ``<prefix>:{<identity>}:<scope>:<name>`` (no
    ``<scope>:`` without one), the identity given by `key` (or the `By`'s),
    as hash tag. All of them are checked at once, all or nothing: one
    ``RL.ALL`` on one server; on a cluster, one per identity, in order,
    stopping at the first denial (see the README).

    ``key`` returning None exempts the request; returning `MISSING` (no
    address) limits it as ``on_missing_identity`` says, with one warning per
    rule. ``exempt(request)`` returning True exempts it too.

    ``denial_cache_max_age``: seconds a cached denial is trusted at most
    (1 by default): how long this process may keep denying an identity an
    operator reset elsewhere (`reset` clears this process's at once).

    ``fail_open``: when Redis cannot be reached, let requests through (True,
    the default: an outage of the limiter should not become an outage of the
    API) or answer 503 (False). Each call to Redis has `timeout` seconds;
    after a failure, Redis is not asked for `cooldown` seconds (the breaker
    of its client). ``denial_cache``: a denied identity is answered locally
    until its retry time, without asking Redis (on by default).

    ``penalty``: a denial locks the identity out for this long (the module's
    ``PENALTY``). ``shadow``: try the rule without enforcing it (``SHADOW``):
    nothing is ever denied or taken, and each request it would have denied
    reaches the app all the same, after ``on_shadow_denied(request,
    decision)`` is called (by default, a line at INFO on the
    ``redis_ratelimit`` logger). ``on_denied(request, decision, headers)``
    makes the 429 (default: `problem_response`).

    Every argument is checked here, so a wrong one fails when the app
    starts; `validate` also asks the server about each limit.
    """

    def __init__(
        self,
        limits: Limits,
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
        on_missing_identity: MissingIdentity = "shared",
        on_denied: DenialHook | None = None,
        exempt: ExemptFunc | None = None,
        denial_cache: bool = True,
        denial_cache_max_age: float = DEFAULT_MAX_AGE_S,
        timeout: float = DEFAULT_TIMEOUT,
        cooldown: float = DEFAULT_COOLDOWN,
    ) -> None:
        if not callable(key):
            raise TypeError(f"key must be a function of the request, not {key!r}")
        single = isinstance(limits, (Limit, NamedPolicy, str, By)) or _is_global(limits)
        items: list[Any] = [limits] if single else list(cast(Sequence[Any], limits))
        tiers: list[Tier] = []
        self.globals: list[Any] = [item for item in items if _is_global(item)]
        items = [item for item in items if not _is_global(item)]
        for item in items:
            if isinstance(item, By):
                tiers += [Tier(item.key, lim, _tier_name(lim)) for lim in item.limits]
            else:
                tiers += [Tier(key, lim, _tier_name(lim)) for lim in _limits([item])]
        if not tiers and not self.globals:
            raise ValueError("give at least one limit")
        names = [tier.name for tier in tiers]
        if len(set(names)) != len(names):
            raise ValueError(
                f"the limits' names {names} must differ: each names its Redis key "
                "and its RateLimit-Policy item (give each a name=...)"
            )
        if isinstance(cost, bool) or not (callable(cost) or isinstance(cost, int)):
            raise TypeError(f"cost must be an int or a function of the request, not {cost!r}")
        if isinstance(cost, int) and cost < 1:
            raise ValueError(f"cost must be at least 1, not {cost}")
        for flag, value in (
            ("fail_open", fail_open),
            ("legacy_headers", legacy_headers),
            ("ietf_headers", ietf_headers),
            ("shadow", shadow),
            ("denial_cache", denial_cache),
        ):
            _check_bool(flag, value)
        if penalty is not None:
            check_duration("penalty", penalty)
        if (penalty is not None or shadow) and any(isinstance(t.limit, NamedPolicy) for t in tiers):
            raise ValueError(
                "a rule with a named policy takes no penalty= or shadow=: they are the "
                "policy's own (PENALTY, SHADOW in its definition), set where it is defined"
            )
        if on_missing_identity not in ("shared", "refuse", "exempt"):
            raise ValueError(
                f'on_missing_identity must be "shared", "refuse" or "exempt", '
                f"not {on_missing_identity!r}"
            )
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"prefix must be a non-empty str, not {prefix!r}")
        if scope is not None and not isinstance(scope, str):
            raise TypeError(f"scope must be a str or None, not {scope!r}")
        check_rate("denial_cache_max_age", denial_cache_max_age)
        check_rate("timeout", timeout)
        check_rate("cooldown", cooldown)
        self.tiers = tiers
        self.limits = tuple(tier.limit for tier in tiers)
        #: The definitions of the rule's named policies, read for the headers
        #: and for their number of tiers (each tier its own key).
        self.policies = PolicyBook()
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
        self.on_missing_identity = on_missing_identity
        self.on_denied = on_denied or problem_response
        self.exempt = exempt
        self.timeout = timeout
        self.cooldown = cooldown
        self.denials = DenialCache(max_age_s=denial_cache_max_age) if denial_cache else None
        self._outages = _OutageLog()
        self._warned_missing = False
        self._told_refused = False
        self._told_unusable = False
        with _rules_lock:
            _rules.add(self)

    def key_names(self) -> list[tuple[str, str | None, str]]:
        """What sets this rule's keys apart from another's: (prefix, scope,
        name) of each limit (the identity is the request's)."""
        return [(self.prefix, self.scope, name) for name in self.names]

    def fingerprint(self) -> Hashable:
        """What makes two rules count the same way into the same keys: the
        same limits under the same names, identities from the same key
        functions, the same penalty, cost and mode. Two rules with equal
        fingerprints are one rule built twice."""
        return (
            self.prefix,
            self.scope,
            tuple(
                (tier.name, _tier_print(tier.limit), _function_name(tier.key))
                for tier in self.tiers
            ),
            self.penalty,
            self.shadow,
            self.cost if isinstance(self.cost, int) else _function_name(self.cost),
        )

    def _identity(self, tier: Tier, request: Request) -> str | Verdict | None:
        identity = tier.key(request)
        if identity is None:
            return None
        if identity is MISSING or identity == "":
            if not self._warned_missing:
                self._warned_missing = True
                logger.warning(
                    "rate limit %s: a request to %s %s has no identity (no client address, or "
                    "one that is not an IP address: a unix socket, a proxy, a test client? see "
                    "forwarded_ip); such requests are %s",
                    self.names,
                    request.method,
                    request.path,
                    {
                        "shared": f"limited together, as {SHARED_IDENTITY!r}",
                        "refuse": "refused with 403",
                        "exempt": "let through unlimited (on_missing_identity='exempt')",
                    }[self.on_missing_identity],
                )
            if self.on_missing_identity == "exempt":
                return None
            if self.on_missing_identity == "refuse":
                return _refusal()
            return SHARED_IDENTITY
        return identity

    def start(
        self,
        request: Request,
        *,
        cluster: bool = False,
        scope: str | None = None,
        read: bool = True,
    ) -> Pending | Verdict:
        """What to ask Redis about `request`, or the verdict when Redis
        need not be asked: exempt, refused, or denied by the local cache.
        Then `finish` with the decisions. `scope`: this request's, when the
        rule has none of its own (a FastAPI dependency's route).

        With named policies whose definitions are not known (or older than
        `policies.MAX_AGE_S`), and `read`, the pending's `reads` are to be
        run first (`learn` their answers), then `start` again with
        ``read=False``."""
        if self.exempt is not None and self.exempt(request):
            return PASS
        keyed: list[tuple[str, str, Limit | NamedPolicy]] = []  # (identity, key, limit)
        scope = self.scope or scope
        scope = f"{scope}:" if scope else ""
        for tier in self.tiers:
            identity = self._identity(tier, request)
            if isinstance(identity, Verdict):
                return identity
            if identity is not None:
                keyed.append(
                    (identity, f"{self.prefix}:{{{identity}}}:{scope}{tier.name}", tier.limit)
                )
        if not keyed and not self.globals:
            return PASS
        named = {
            id(limit): limit.resolve(request)
            for _, _, limit in keyed
            if isinstance(limit, NamedPolicy)
        }
        if read:
            stale = sorted({n for n in named.values() if self.policies.stale(n)})
            if stale:
                return Pending([], (), reads=[get_command(n) for n in stale])
        cost = self.cost(request) if callable(self.cost) else self.cost
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 1:
            raise ValueError(f"the rule's cost function returned {cost!r}: it must be an int >= 1")
        cache_key: tuple[str | int, ...] = (
            cost,
            *(key for _, key, _ in keyed),
            *sorted(named.values()),
        )
        if self.denials is not None and keyed:
            cached = self.denials.get(cache_key)
            if cached is not None:
                return self.verdict(cached, request)
        options = commands.CheckOptions(cost=cost, penalty=self.penalty, shadow=self.shadow)
        groups: list[list[tuple[str, Limit]]] = []
        inline = [(i, k, lim) for i, k, lim in keyed if isinstance(lim, Limit)]
        if cluster:
            # Keys of one identity share a hash tag, so a slot: one RL.ALL each.
            by_identity: dict[str, list[tuple[str, Limit]]] = {}
            for identity, key, limit in inline:
                by_identity.setdefault(identity, []).append((key, limit))
            groups = list(by_identity.values())
        elif inline:
            groups = [[(key, limit) for _, key, limit in inline]]
        checks = [
            commands.check(g[0][0], g[0][1], **options)
            if len(g) == 1
            else commands.check_all(g, **options)
            for g in groups
        ]
        # A named policy is its own RL.CHECK, after the inline limits; its
        # tiers' keys are the rule's key for it, then :0, :1... (one slot:
        # the identity is the hash tag).
        checks += [
            check_command(key, named[id(limit)], self.policies, label=limit.key_name, **options)
            for _, key, limit in keyed
            if isinstance(limit, NamedPolicy)
        ]
        return Pending(checks, cache_key, cost)

    def learn(self, reads: list[Command[PolicyInfo | None]], answers: list[Any]) -> None:
        """Keeps the definitions `reads` answered (None: no such policy)."""
        for command, info in zip(reads, answers, strict=True):
            self.policies.put(str(command.args[1]), info)

    def finish(self, pending: Pending, decisions: list[Decision], request: Request) -> Verdict:
        """The verdict from the decisions of `pending`'s commands (all of
        them, or those up to the first denial)."""
        decision = decisions[0] if len(decisions) == 1 else combine(decisions)
        # A global limit's denial is this process's, for about an interval:
        # not an identity's to cache.
        by_redis = decisions[len(self.globals) :]
        if self.denials is not None and any(not d.allowed for d in by_redis):
            self.denials.put(pending.cache_key, decision)
        return self.verdict(decision, request)

    def spend_globals(self, pending: Pending) -> list[Decision]:
        """Each global limit's decision on spending the request's cost
        (sync ones only: `spend_globals_async` under ASGI), stopping at
        the first denial; what was spent goes back if one denies."""
        decisions: list[Decision] = []
        for gl in self.globals:
            decision = gl.check(pending.cost)
            if not isinstance(decision, Decision):  # an AsyncGlobalLimit's coroutine
                decision.close()
                raise TypeError(
                    "an AsyncGlobalLimit needs the ASGI middleware (or a FastAPI "
                    "dependency); give a sync app a GlobalLimit"
                )
            decisions.append(decision)
            if not decision.allowed:
                self.give_back(pending, decisions)
                break
        return decisions

    async def spend_globals_async(self, pending: Pending) -> list[Decision]:
        """`spend_globals`, awaiting an `AsyncGlobalLimit` (which suspends
        only for its first requests); a `GlobalLimit` is asked as it is."""
        decisions: list[Decision] = []
        for gl in self.globals:
            answer = gl.check(pending.cost)
            decision = answer if isinstance(answer, Decision) else await answer
            decisions.append(decision)
            if not decision.allowed:
                self.give_back(pending, decisions)
                break
        return decisions

    def give_back(self, pending: Pending, decisions: Sequence[Decision]) -> None:
        """Gives back the cost the global limits allowed (their decisions,
        in order) when the request is not let through after all."""
        for gl, decision in zip(self.globals, decisions, strict=False):
            if decision.allowed:
                gl.give_back(pending.cost)

    def verdict(self, decision: Decision, request: Request) -> Verdict:
        """Denied: `on_denied`'s response, with the headers (``Retry-After``
        unless the request can never pass). Allowed: the app's response,
        with the headers; a shadow denial is told to `on_shadow_denied`
        first."""
        layers = _layers(request)
        layers.append((decision, self.legacy_headers, self.ietf_headers))
        headers = layered_headers(request.raw)
        if decision.allowed:
            if decision.shadow_denied:
                self.on_shadow_denied(request, decision)
            return Verdict(headers=headers)
        return Verdict(response=self.on_denied(request, decision, headers))

    def refused(self, error: Exception) -> None:
        """Redis refused the credentials or rights (`REFUSED_CREDENTIALS`):
        logged at ERROR once; the caller raises."""
        if not self._told_refused:
            self._told_refused = True
            logger.error(
                "rate limit %s: Redis refused the rate limiter's credentials or rights (%s: "
                "%s); this is a configuration error, not an outage: requests are not let "
                "through unlimited, each raises until the password or ACL is fixed",
                self.names,
                type(error).__name__,
                error,
            )

    def unusable(self, error: Exception) -> Verdict:
        """The server cannot run this rule (`UNUSABLE`): logged at ERROR once,
        then answered as `fail_open` says. The named policies' definitions
        are read again on the next request (a policy's tiers may have
        changed, or it may be defined since)."""
        self.policies.forget()
        if not self._told_unusable:
            self._told_unusable = True
            logger.error(
                "rate limit %s cannot run on this server (%s: %s); requests are %s until "
                "it is fixed (this is logged once)",
                self.names,
                type(error).__name__,
                error,
                "let through unlimited (fail_open)" if self.fail_open else "refused with 503",
            )
        return self._fail_mode()

    def check_at_startup(self, redis: SyncClient) -> None:
        """`validate` when the app starts, through the middleware's own
        client (short timeouts, no retries): a limit the server refuses, a
        server without the module, or credentials it refuses raise, so the
        app does not start; Redis unreachable is only logged (the rule's
        fail mode covers it)."""
        try:
            self.validate(redis)
        except REFUSED_CREDENTIALS:
            raise
        except UNREACHABLE as error:
            logger.warning(
                "rate limit %s: not validated at startup, Redis cannot be asked (%s)",
                self.names,
                error,
            )

    def unreachable(self, error: Exception) -> Verdict:
        """Redis could not decide (unreachable, or out of memory for a new
        key): pass, or 503, as `fail_open` says."""
        self._outages.note(error, self.fail_open)
        return self._fail_mode()

    def _fail_mode(self) -> Verdict:
        if self.fail_open:
            return PASS
        text = "Service unavailable: the rate limiter cannot be reached.\n"
        return Verdict(response=_text_response(503, "Service Unavailable", text, []))

    @overload
    def validate(self, redis: AsyncClient) -> Coroutine[Any, Any, None]: ...
    @overload
    def validate(self, redis: SyncClient) -> None: ...

    def validate(self, redis: SyncClient | AsyncClient) -> Coroutine[Any, Any, None] | None:
        """Asks the server about each limit once (``RL.PEEK``, which changes
        nothing), so a parameter the module refuses, or a server without the
        module, fails when the app starts: ``rule.validate(redis)``, or
        ``await rule.validate(redis)`` with an asyncio client. Raises the
        server's error (`InvalidArgumentError`, `ModuleNotLoadedError`)."""
        if isinstance(redis, (AsyncRedis, AsyncRedisCluster)):
            limiter = AsyncRateLimiter(redis)

            async def peek_all() -> None:
                for command in self.peeks():
                    await limiter.run(command)

            return peek_all()
        sync = RateLimiter(redis)
        for command in self.peeks():
            sync.run(command)
        return None

    def peeks(self) -> list[Command[Decision]]:
        """One ``RL.PEEK`` per limit, on a key no request uses (for a named
        policy of a fixed name, ``RL.CHECK ... PEEK``: the policy must be
        defined; for a global limit, a peek of its own key, which changes
        nothing): what `validate` sends."""
        out: list[Command[Decision]] = [commands.peek(gl.key, gl.limit) for gl in self.globals]
        for tier in self.tiers:
            key = f"{self.prefix}:{{rl-validate}}:{tier.name}"
            if isinstance(tier.limit, Limit):
                out.append(commands.peek(key, tier.limit))
            elif not callable(tier.limit.name):
                out.append(check_command(key, tier.limit.name, PolicyBook(), peek=True))
        return out


def _function_name(function: Callable[..., Any]) -> str:
    """A function as its module and qualified name: the same in an app
    built twice, where the function objects (closures) differ."""
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None) or type(function).__qualname__
    return f"{module}.{name}"


#: Where each rule that decides on a request leaves its decision, in the
#: request's WSGI environ or ASGI scope (which every layer of one request
#: shares: a middleware, then a view's decorator or a route's dependency).
LAYERS = "redis_ratelimit.layers"

#: Every field the rules write.
RATE_LIMIT_FIELDS = frozenset(
    name.lower()
    for name in (
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
        "RateLimit",
        "RateLimit-Policy",
        "Retry-After",
    )
)


def _layers(request: Request) -> list[tuple[Decision, bool, bool]]:
    raw: Any = request.raw
    try:
        layers: list[tuple[Decision, bool, bool]] = raw.setdefault(LAYERS, [])
    except AttributeError:  # a read-only mapping: this rule alone
        return []
    return layers


def layered_headers(raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The rate-limit fields of a request that several rules decided on (a
    site-wide middleware, then a view's decorator): those of all of them
    as one decision, so the binding limit (the one that denied, else the
    one with least remaining) speaks in ``X-RateLimit-*`` and
    ``Retry-After``, and every limit has its item in ``RateLimit``. Each
    layer writes them over the last (`restamp`); the outermost, writing
    last, writes them for all, once."""
    layers: list[tuple[Decision, bool, bool]] = list(raw.get(LAYERS, ()))
    if not layers:
        return []
    decision = layers[0][0] if len(layers) == 1 else combine([d for d, _, _ in layers])
    legacy = any(legacy for _, legacy, _ in layers)
    ietf = any(ietf for _, _, ietf in layers)
    return list(decision.headers(legacy=legacy, ietf=ietf).items())


def restamp(
    existing: Sequence[tuple[str, str]], headers: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    """`existing` header pairs with `headers` in place of any field of the
    same name (an inner layer's), so each field goes out once."""
    names = {name.lower() for name, _ in headers}
    return [(n, v) for n, v in existing if n.lower() not in names] + list(headers)


#: Every rule of this process, for `reset` to clear their denial caches.
_rules_lock = threading.Lock()
_rules: weakref.WeakSet[Rule] = weakref.WeakSet()


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "\\*?[]" else c for c in text)


@overload
def reset(redis: AsyncClient, identity: str, *, prefix: str = "rl") -> Coroutine[Any, Any, int]: ...
@overload
def reset(redis: SyncClient, identity: str, *, prefix: str = "rl") -> int: ...


def reset(
    redis: SyncClient | AsyncClient, identity: str, *, prefix: str = "rl"
) -> int | Coroutine[Any, Any, int]:
    """Lets one client start afresh: deletes every key of `identity` (as
    the key function gives it: ``"ip:203.0.113.9"``, ``"user:alice"``) under
    `prefix`, in every rule and scope, penalties included, and forgets it
    in the denial cache of every rule of this process. Other processes
    (gunicorn's other workers) ask Redis again within their rules'
    ``denial_cache_max_age`` (1 s by default). Returns how many keys were
    deleted; ``await`` it with an asyncio client.

    Found by ``SCAN`` (every primary of a cluster), so it suits an
    operator's action, not every request."""
    if not isinstance(identity, str) or not identity:
        raise ValueError(
            f"identity must be a non-empty str, such as 'ip:10.0.0.7', not {identity!r}"
        )
    key_prefix = f"{prefix}:{{{identity}}}:"
    pattern = _glob_escape(key_prefix) + "*"

    def forget_locally() -> None:
        def gone(cache_key: Hashable) -> bool:
            keys = cache_key if isinstance(cache_key, tuple) else ()
            return any(isinstance(k, str) and k.startswith(key_prefix) for k in keys)

        with _rules_lock:
            rules = list(_rules)
        for rule in rules:
            if rule.denials is not None:
                rule.denials.forget(gone)

    if isinstance(redis, (AsyncRedis, AsyncRedisCluster)):
        client = redis

        async def reset_async() -> int:
            keys = [key async for key in client.scan_iter(match=pattern, count=1000)]
            deleted = 0
            for start in range(0, len(keys), 500):  # one slot: one command per batch
                deleted += int(await client.unlink(*keys[start : start + 500]))
            forget_locally()
            return deleted

        return reset_async()
    keys = list(redis.scan_iter(match=pattern, count=1000))
    deleted = 0
    for start in range(0, len(keys), 500):
        deleted += int(redis.unlink(*keys[start : start + 500]))
    forget_locally()
    return deleted


def combine(decisions: Sequence[Decision]) -> Decision:
    """Several checks (one per identity, on a cluster) as one decision: each
    tier kept, allowed if all were, the rest from the binding tier."""
    tiers = tuple(t for d in decisions for t in (d.tiers or (d,)))
    allowed = all(d.allowed for d in decisions)
    whole = Decision(
        allowed=allowed,
        limit=0,
        remaining=0,
        retry_after=timedelta(0),
        reset_after=timedelta(0),
        tiers=tiers,
    )
    b = whole.binding
    return Decision(
        allowed=allowed,
        limit=b.limit,
        remaining=b.remaining,
        retry_after=b.retry_after if not allowed else timedelta(0),
        reset_after=max(t.reset_after for t in tiers),
        delay=max(t.delay for t in tiers),
        tiers=tiers,
    )


def problem_response(
    request: Request, decision: Decision, headers: list[tuple[str, str]]
) -> Response:
    """The default 429: an ``application/problem+json`` body (RFC 9457) of
    the IETF draft's quota-exceeded type, and the rate-limit headers."""
    retry = decision.retry_after_header()
    problem = {
        "type": QUOTA_EXCEEDED,
        "title": "Request cannot be satisfied as assigned quota has been exceeded",
        "status": 429,
        "detail": (
            f"Too many requests: retry in {retry} s."
            if retry is not None
            else "Too many requests: this request is larger than the limit and can never pass."
        ),
    }
    body = json.dumps(problem).encode()
    return Response(
        429,
        "Too Many Requests",
        [
            ("Content-Type", "application/problem+json"),
            ("Content-Length", str(len(body))),
            *headers,
        ],
        body,
    )


def _refusal() -> Verdict:
    body = json.dumps(
        {
            "title": "The client cannot be identified for rate limiting",
            "status": 403,
        }
    ).encode()
    return Verdict(
        response=Response(
            403,
            "Forbidden",
            [("Content-Type", "application/problem+json"), ("Content-Length", str(len(body)))],
            body,
        )
    )


def exempt_paths(*prefixes: str) -> ExemptFunc:
    """Exempts requests whose path starts with one of `prefixes`
    (``exempt=exempt_paths("/health", "/metrics")``)."""
    return lambda request: request.path.startswith(prefixes)


def exempt_methods(*methods: str) -> ExemptFunc:
    """Exempts requests of these methods (``exempt_methods("OPTIONS")``)."""
    upper = {m.upper() for m in methods}
    return lambda request: request.method.upper() in upper


def _server_of(redis: Any) -> Hashable:
    """The server a client writes to, so that two client objects to one
    server are seen as one: (host, port, db) or (socket path, db); a
    cluster by its primaries' addresses (every client of a cluster learns
    them all); a client of another kind by its own identity."""
    get_nodes = getattr(redis, "get_nodes", None)
    if isinstance(redis, (RedisCluster, AsyncRedisCluster)) and get_nodes is not None:
        return ("cluster", frozenset((node.host, node.port) for node in get_nodes()))
    pool = getattr(redis, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if isinstance(kwargs, dict):
        if kwargs.get("path"):
            return ("unix", kwargs["path"], kwargs.get("db", 0))
        port = kwargs.get("port", 6379)
        return ("tcp", _addresses(kwargs.get("host", "localhost"), port), port, kwargs.get("db", 0))
    return ("object", id(redis))


def _addresses(host: str, port: int) -> Hashable:
    """The addresses `host` names ("localhost" and "127.0.0.1" are one
    server), or the name itself when it does not resolve now."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return host
    return frozenset(info[4][0] for info in infos)


@dataclass(frozen=True)
class _Claim:
    rule: weakref.ref[Rule]
    client: weakref.ref[Any]
    fingerprint: Hashable
    owner: str


_claims_lock = threading.Lock()
_claims: dict[Hashable, dict[tuple[str, str | None, str], _Claim]] = {}


def claim_keys(redis: Any, rule: Rule, owner: str) -> None:
    """Records that `owner` (a middleware, a view) writes `rule`'s keys on
    `redis`'s server; raises ValueError if another live rule that counts
    differently already does through the same client, so two rules never
    count into one key by accident. Called when each is built.

    The same rule built again (an app factory called twice, a test's
    fixture) takes the keys over: its keys are its own, counted the same
    way. A rule that is gone (its app dropped) holds no keys; before
    refusing, the garbage collector is run once, since a dropped app often
    sits in a reference cycle.

    Through another client object of the same server, the same clash is a
    warning, not a refusal: a process holds apps it no longer serves (a
    test's, kept by a traceback or a logger) for as long as it likes, and
    a per-server refusal would refuse every rebuild with new limits after
    them; a clash through one client is the same app's."""
    server = _server_of(redis)
    fingerprint = rule.fingerprint()
    conflict: tuple[tuple[str, str | None, str], _Claim] | None = None
    for attempt in range(2):
        with _claims_lock:
            claimed = _claims.setdefault(server, {})
            conflict = None
            for name in rule.key_names():
                other = claimed.get(name)
                if other is None or other.fingerprint == fingerprint:
                    continue
                if other.rule() not in (None, rule):  # no reference kept: gc may free it
                    conflict = (name, other)
                    if other.client() is redis:
                        break
            if conflict is None or conflict[1].client() is not redis:
                for name in rule.key_names():
                    claimed[name] = _Claim(
                        weakref.ref(rule), weakref.ref(redis), fingerprint, owner
                    )
                break
        if attempt == 0:
            gc.collect()  # outside the lock: finalizers may run
    if conflict is None:
        return
    (prefix, scope, limit), other = conflict
    keys = f"{prefix}:{{identity}}:{scope + ':' if scope else ''}{limit}"
    if other.client() is not redis:
        logger.warning(
            "%s and %s (through another client of the same Redis server) would share the "
            "Redis keys %s with different limits: if both serve requests, give one of them "
            "another scope= (or the limit another name=)",
            owner,
            other.owner,
            keys,
        )
        return
    raise ValueError(
        f"{owner} and {other.owner} would share the Redis keys {keys} with different "
        "limits: give one of them another scope= (or the limit another name=)"
    )


def release_keys(redis: Any, owner: str) -> None:
    """Forgets `owner`'s claims (a middleware rebuilt, a test's app gone)."""
    with _claims_lock:
        claimed = _claims.get(_server_of(redis), {})
        for name in [n for n, c in claimed.items() if c.owner == owner]:
            del claimed[name]


def build_rule(limits: Limits | None, rule: Rule | None, options: RuleOptions) -> Rule:
    """The middleware's rule: `rule`, or one made of `limits` and `options`."""
    if rule is not None:
        if limits is not None or options:
            raise TypeError("give rule=Rule(...) or limits= and the rule's options, not both")
        return rule
    if limits is None:
        raise TypeError("give limits= (or rule=Rule(...))")
    return Rule(limits, **options)


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


@dataclass(frozen=True)
class SpendGlobals:
    """A step of `Deciding`: spend the rule's global limits on `pending`
    (`Rule.spend_globals`, or `Rule.spend_globals_async` under ASGI); its
    answer is their decisions."""

    pending: Pending


#: What deciding a request waits for: a command's answer from Redis, or the
#: global limits' decisions (`SpendGlobals`).
Step = Command[Any] | SpendGlobals


class Deciding:
    """The verdict on one request, worked out here, once, for every
    adapter, step by step: `start`, `answer` and `fail` each give the next
    `Step`, which the adapter runs (through a sync guard, or awaited under
    ASGI) and hands back (what it gave, or the error it raised, handled as
    if raised here), or the `Verdict`.

    Named policies' definitions are read first, if needed; then the rule's
    global limits decide, locally; then Redis, command by command, stopping
    at the first denial. A request not let through gives back what the
    global limits allowed. Redis unreachable or unusable is answered as the
    rule says; refused credentials are logged and raised."""

    def __init__(
        self, rule: Rule, request: Request, cluster: bool, scope: str | None = None
    ) -> None:
        self._steps = _steps(rule, request, cluster, scope)

    def start(self) -> Step | Verdict:
        """The first step."""
        return self._resume(lambda: self._steps.send(None))

    def answer(self, value: Any) -> Step | Verdict:
        """Hands back what the last step gave."""
        return self._resume(lambda: self._steps.send(value))

    def fail(self, error: Exception) -> Step | Verdict:
        """Hands back the error the last step raised."""
        return self._resume(lambda: self._steps.throw(error))

    def _resume(self, resume: Callable[[], Step]) -> Step | Verdict:
        try:
            return resume()
        except StopIteration as done:
            verdict: Verdict = done.value
            return verdict


class _Outage(Exception):
    """Redis could not answer a command: the request's verdict is `verdict`."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__()
        self.verdict = verdict


def _steps(
    rule: Rule, request: Request, cluster: bool, scope: str | None
) -> Generator[Step, Any, Verdict]:
    """`Deciding`'s course."""
    pending = rule.start(request, cluster=cluster, scope=scope)
    if isinstance(pending, Pending) and pending.reads:
        answers: list[Any] = []
        try:
            for read in pending.reads:
                answers.append((yield from _asked(rule, read)))
        except _Outage as outage:
            return outage.verdict
        rule.learn(pending.reads, answers)
        pending = rule.start(request, cluster=cluster, scope=scope, read=False)
    if isinstance(pending, Verdict):
        return pending
    decisions: list[Decision] = yield SpendGlobals(pending)
    if decisions and not decisions[-1].allowed:
        return rule.finish(pending, decisions, request)
    try:
        for command in pending.commands:
            decision: Decision = yield from _asked(rule, command)
            decisions.append(decision)
            if not decision.allowed:
                break
        verdict = rule.finish(pending, decisions, request)
    except _Outage as outage:
        verdict = outage.verdict
    if verdict.response is not None:
        rule.give_back(pending, decisions)
    return verdict


def _asked(rule: Rule, command: Command[Any]) -> Generator[Step, Any, Any]:
    """`command`'s answer; `_Outage` when Redis cannot be asked."""
    try:
        return (yield command)
    except REFUSED_CREDENTIALS as error:
        rule.refused(error)
        raise
    except UNREACHABLE as error:
        raise _Outage(rule.unreachable(error)) from error
    except UNUSABLE as error:
        raise _Outage(rule.unusable(error)) from error


def decide(
    rule: Rule, request: Request, run: Callable[[Command[Any]], Any], cluster: bool
) -> Verdict:
    """The verdict on `request` (`Deciding`), asking Redis through `run` (a
    sync guard's)."""
    deciding = Deciding(rule, request, cluster)
    step = deciding.start()
    while not isinstance(step, Verdict):
        try:
            if isinstance(step, SpendGlobals):
                answer = rule.spend_globals(step.pending)
            else:
                answer = run(step)
        except Exception as error:
            step = deciding.fail(error)
        else:
            step = deciding.answer(answer)
    return step
