"""A client for the redis-ratelimit module: typed decisions, HTTP headers,
and middleware for web apps (``redis_ratelimit.web``)."""

from .async_client import AsyncRateLimiter
from .client import RateLimiter
from .commands import CheckOptions, Key
from .decision import Decision, Headers, Lease, Policy
from .errors import (
    InvalidArgumentError,
    ModuleNotLoadedError,
    RateLimitError,
    RateLimitExceeded,
    UnblockedError,
    WrongTypeError,
)
from .global_limit import AsyncGlobalLimit, GlobalLimit, Stats
from .info import KeyInfo
from .limits import GCRA, FixedWindow, LeakyBucket, Limit, SlidingCounter, SlidingLog, TokenBucket
from .top import TopEntry
from .units import Duration, Rate

__all__ = [
    "GCRA",
    "AsyncGlobalLimit",
    "AsyncRateLimiter",
    "CheckOptions",
    "Decision",
    "Duration",
    "FixedWindow",
    "GlobalLimit",
    "Headers",
    "InvalidArgumentError",
    "Key",
    "KeyInfo",
    "LeakyBucket",
    "Lease",
    "Limit",
    "ModuleNotLoadedError",
    "Policy",
    "Rate",
    "RateLimitError",
    "RateLimitExceeded",
    "RateLimiter",
    "SlidingCounter",
    "SlidingLog",
    "Stats",
    "TokenBucket",
    "TopEntry",
    "UnblockedError",
    "WrongTypeError",
]
