"""The limits: one value per algorithm, holding its parameters.

A limit is what the module needs to decide (the algorithm and its
parameters), what ``RL.ALL`` needs for each tier, and what the IETF
``RateLimit-Policy`` field describes (a quota over a window). Keeping the
three together means a limit is written once, whether it is checked alone,
as a tier of ``RL.ALL``, or by the web middleware.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import timedelta
from typing import ClassVar

from .decision import Policy
from .units import Duration, Rate, decimal_arg, duration_arg, duration_ms

#: One argument of a command, as redis-py sends it.
Arg = str | int | bytes


@dataclass(frozen=True)
class Limit(ABC):
    """An algorithm with its parameters.

    ``name`` names the policy in the IETF ``RateLimit-Policy`` and
    ``RateLimit`` fields (and, in the middleware, the tier's Redis key); it
    defaults to the algorithm's name, e.g. ``"tokenbucket"``.
    """

    #: The algorithm as ``RL.ALL`` spells it; the command is ``RL.<word>``.
    word: ClassVar[str]

    name: str | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        self.policy()  # a name the HTTP fields cannot carry fails here, not per request

    @property
    def command(self) -> str:
        return "RL." + self.word

    @abstractmethod
    def params(self) -> list[Arg]:
        """The parameters after the key, in the command's order."""

    @property
    @abstractmethod
    def quota(self) -> int:
        """The most the key allows at once: the reply's ``limit``."""

    @abstractmethod
    def window_ms(self) -> float | None:
        """The span the quota is for: the window, or for the buckets and GCRA
        the time an empty key takes to fill up again (quota / rate)."""

    def policy(self) -> Policy:
        window = self.window_ms()
        return Policy(
            name=self.name if self.name is not None else self.word.lower(),
            quota=self.quota,
            window=None if window is None else timedelta(milliseconds=window),
        )


def _refill_ms(amount: int, rate: Rate) -> float | None:
    """How long `amount` takes at `rate` a second; None for a rate the
    server will refuse anyway."""
    return amount / rate * 1000 if rate > 0 else None


@dataclass(frozen=True)
class _Bucket(Limit):
    """The parameters of the two buckets: ``capacity``, ``rate`` a second."""

    capacity: int
    rate: Rate

    def params(self) -> list[Arg]:
        return [self.capacity, decimal_arg(self.rate)]

    @property
    def quota(self) -> int:
        return self.capacity

    def window_ms(self) -> float | None:
        return _refill_ms(self.capacity, self.rate)


@dataclass(frozen=True)
class _Window(Limit):
    """The parameters of the fixed window and the log: ``limit`` per
    ``window``."""

    limit: int
    window: Duration

    def params(self) -> list[Arg]:
        return [self.limit, duration_arg(self.window)]

    @property
    def quota(self) -> int:
        return self.limit

    def window_ms(self) -> float | None:
        return duration_ms(self.window)


@dataclass(frozen=True)
class TokenBucket(_Bucket):
    """``RL.TOKENBUCKET``: starts full with ``capacity`` tokens, refills
    ``rate`` tokens a second; bursts up to ``capacity``."""

    word: ClassVar[str] = "TOKENBUCKET"


@dataclass(frozen=True)
class SlidingCounter(_Window):
    """``RL.SLIDINGCOUNTER``: about ``limit`` requests in any ``window``,
    estimated from ``precision`` counters (the server's default, 1, when
    None)."""

    word: ClassVar[str] = "SLIDINGCOUNTER"
    precision: int | None = None

    def params(self) -> list[Arg]:
        words = super().params()
        if self.precision is not None:
            words += ["PRECISION", self.precision]
        return words


@dataclass(frozen=True)
class FixedWindow(_Window):
    """``RL.FIXEDWINDOW``: ``limit`` requests per ``window``, windows
    aligned to the Unix epoch."""

    word: ClassVar[str] = "FIXEDWINDOW"


@dataclass(frozen=True)
class SlidingLog(_Window):
    """``RL.SLIDINGLOG``: exactly at most ``limit`` requests in any
    ``window``."""

    word: ClassVar[str] = "SLIDINGLOG"


@dataclass(frozen=True)
class LeakyBucket(_Bucket):
    """``RL.LEAKYBUCKET``: a queue of ``capacity`` leaving at ``rate`` a
    second; an allowed decision says how long to wait (``delay``)."""

    word: ClassVar[str] = "LEAKYBUCKET"


@dataclass(frozen=True)
class GCRA(Limit):
    """``RL.GCRA``: ``count`` per ``period``, with bursts of ``burst``
    beyond the steady rate (the limit is ``burst + 1``, redis-cell's
    meaning)."""

    word: ClassVar[str] = "GCRA"
    burst: int
    count: int
    period: Duration

    def params(self) -> list[Arg]:
        return [self.burst, self.count, duration_arg(self.period)]

    @property
    def quota(self) -> int:
        return self.burst + 1

    def window_ms(self) -> float | None:
        period = duration_ms(self.period)
        if period is None or self.count <= 0:
            return None
        return period / self.count * self.quota
