"""A client for the redis-ratelimit module: typed decisions, HTTP headers,
and middleware for web apps (``redis_ratelimit.web``)."""

from .async_client import AsyncRateLimiter
from .client import RateLimiter
from .commands import CheckOptions, Key
from .decision import Decision, Headers, Lease, Policy
from .errors import (
    InvalidArgumentError,
    ModuleNotLoadedError,
    PolicyNotFoundError,
    RateLimitError,
    RateLimitExceeded,
    UnblockedError,
    WrongTypeError,
)
from .global_limit import AsyncGlobalLimit, GlobalLimit, Stats
from .info import KeyInfo
from .limits import GCRA, FixedWindow, LeakyBucket, Limit, SlidingCounter, SlidingLog, TokenBucket
from .policies import (
    NamedPolicy,
    PolicyChange,
    PolicyDefinition,
    PolicyInfo,
    PolicySyncError,
    SyncReport,
    load_policies,
    policy_keys,
    sync_policies,
)
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
    "NamedPolicy",
    "Policy",
    "PolicyChange",
    "PolicyDefinition",
    "PolicyInfo",
    "PolicyNotFoundError",
    "PolicySyncError",
    "Rate",
    "RateLimitError",
    "RateLimitExceeded",
    "RateLimiter",
    "SlidingCounter",
    "SlidingLog",
    "Stats",
    "SyncReport",
    "TokenBucket",
    "TopEntry",
    "UnblockedError",
    "WrongTypeError",
    "load_policies",
    "policy_keys",
    "sync_policies",
]
