"""The limits: one value per algorithm, holding its parameters.

A limit is what the module needs to decide (the algorithm and its
parameters), what ``RL.ALL`` needs for each tier, and what the IETF
``RateLimit-Policy`` field describes (a quota over a window). Keeping the
three together means a limit is written once, whether it is checked alone,
as a tier of ``RL.ALL``, or by the web middleware.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from .decision import Policy
from .units import (
    Duration,
    Rate,
    check_count,
    check_duration,
    check_rate,
    decimal_arg,
    duration_arg,
    duration_ms,
    ms,
)

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
        # Every parameter is checked when the limit is made (at import, for
        # a web app's rules), not on the first request: wrong types by name,
        # and values the module would refuse. The module stays the judge of
        # the rest (`Rule.validate` asks it).
        self.validate()
        self.policy()  # a name the HTTP fields cannot carry fails here, not per request

    def validate(self) -> None:
        """Raises TypeError or ValueError for a parameter the module would
        refuse or misread."""
        if self.name is not None and not isinstance(self.name, str):
            raise TypeError(f"name must be a str, not {type(self.name).__name__}")

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

    def refill_ms(self) -> float | None:
        """How long one unit of quota takes to come back, for the limits
        that refill at a steady rate (the buckets, GCRA); None for the
        windows, whose quota comes back as the window moves."""
        return None

    def policy(self) -> Policy:
        window = self.window_ms()
        refill = self.refill_ms()
        return Policy(
            name=self.name if self.name is not None else self.word.lower(),
            quota=self.quota,
            window=None if window is None else ms(window),
            refill=None if refill is None else ms(refill),
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

    def validate(self) -> None:
        super().validate()
        check_count(f"{type(self).__name__}.capacity", self.capacity)
        check_rate(f"{type(self).__name__}.rate", self.rate)

    def params(self) -> list[Arg]:
        return [self.capacity, decimal_arg(self.rate)]

    @property
    def quota(self) -> int:
        return self.capacity

    def window_ms(self) -> float | None:
        return _refill_ms(self.capacity, self.rate)

    def refill_ms(self) -> float | None:
        return _refill_ms(1, self.rate)


@dataclass(frozen=True)
class _Window(Limit):
    """The parameters of the fixed window and the log: ``limit`` per
    ``window``."""

    limit: int
    window: Duration

    def validate(self) -> None:
        super().validate()
        check_count(f"{type(self).__name__}.limit", self.limit)
        check_duration(f"{type(self).__name__}.window", self.window)

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

    def validate(self) -> None:
        super().validate()
        if self.precision is not None:
            check_count("SlidingCounter.precision", self.precision)

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

    def validate(self) -> None:
        super().validate()
        if isinstance(self.burst, bool) or not isinstance(self.burst, int) or self.burst < 0:
            raise ValueError(f"GCRA.burst must be an int of at least 0, not {self.burst!r}")
        check_count("GCRA.count", self.count)
        check_duration("GCRA.period", self.period)

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

    def refill_ms(self) -> float | None:
        period = duration_ms(self.period)
        return None if period is None or self.count <= 0 else period / self.count


#: Every algorithm, the one list the client keeps of them: the per-algorithm
#: methods of the clients, the package's exports and the rate strings'
#: ``algorithm=`` all read it.
ALGORITHMS: tuple[type[Limit], ...] = (
    TokenBucket,
    SlidingCounter,
    FixedWindow,
    SlidingLog,
    LeakyBucket,
    GCRA,
)

# The units a rate string may name, each spelt out in full: a unit is read
# exactly or refused, never guessed from a prefix ("ms" is not minutes, "hs"
# is nothing). Months and years are left out: their length varies. The
# module's own duration units (ms, s, m, h, d) mean the same here.
_UNIT_MS: dict[str, int] = {}
for _ms, _words in (
    (1, ("ms", "msec", "msecs", "millisecond", "milliseconds")),
    (1000, ("s", "sec", "secs", "second", "seconds")),
    (60_000, ("m", "min", "mins", "minute", "minutes")),
    (3_600_000, ("h", "hr", "hrs", "hour", "hours")),
    (86_400_000, ("d", "day", "days")),
):
    _UNIT_MS |= dict.fromkeys(_words, _ms)
_RATE = re.compile(r"(\d+)\s*(?:/|per)\s*(\d+)?\s*([a-z]+)", re.IGNORECASE)


def parse_rates(text: str, algorithm: type[_Window] | None = None) -> list[Limit]:
    """Limits from a rate string, as ``limits``, slowapi and flask-limiter
    write them: ``"10/second"``, ``"100 per minute; 1000/day"``,
    ``"5 per 10 seconds"`` (items split by ``;`` or ``,``).

    Each is a `SlidingCounter` (about N in any window) unless `algorithm`
    says otherwise (`FixedWindow`, `SlidingLog`), named after what it says,
    e.g. ``"100-per-minute"``, so several in one rule keep apart.
    """
    kind: type[_Window] = algorithm or SlidingCounter
    out: list[Limit] = []
    for item in re.split(r"[;,]", text):
        if not item.strip():
            continue
        match = _RATE.fullmatch(item.strip())
        unit_ms = _UNIT_MS.get(match.group(3).lower()) if match else None
        if match is None or unit_ms is None:
            raise ValueError(
                f"rate {item.strip()!r} is not N/unit or N per [M] unit, unit one of "
                "ms, second, minute, hour, day (or s, m, h, d; months and years are "
                'refused: their length varies), e.g. "10/second", "100 per minute", '
                '"5 per 10 seconds"'
            )
        count, every = int(match.group(1)), int(match.group(2) or 1)
        # Whole seconds stay an int of seconds; anything finer goes in
        # milliseconds, which the module reads exactly (no float rounding).
        span_ms = every * unit_ms
        window: Duration = span_ms // 1000 if span_ms % 1000 == 0 else f"{span_ms}ms"
        unit = match.group(3).lower()
        if len(unit) > 2 and unit.endswith("s") and unit[:-1] in _UNIT_MS:
            unit = unit[:-1]  # the name as before: "5 per 10 seconds" is "5-per-10second"
        span = unit if every == 1 else f"{every}{unit}"
        out.append(kind(count, window, name=f"{count}-per-{span}"))
    if not out:
        raise ValueError(f"no rate in {text!r}")
    return out
