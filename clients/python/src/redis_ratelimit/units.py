"""Numbers and durations as the module reads them, and back.

The module is the one judge of what is valid: these functions only spell a
Python value the way the module's grammar reads it (a decimal, with a unit for
durations), so that the server's error, naming the parameter, is the one the
caller sees. The parsing half exists for the HTTP headers alone, which need a
policy's window in seconds.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from decimal import Decimal

#: A duration: seconds when a number (``60``, ``1.5``), a string with a unit
#: the module reads (``"250ms"``, ``"1m"``, ``"1h"``, ``"1d"``), or a timedelta.
Duration = int | float | str | timedelta

#: A rate, per second: ``0.5``, ``1000``.
Rate = int | float

_MS_PER_UNIT = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# No spaces: the module reads "60s", and refuses "60 s".
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)?", re.IGNORECASE)
_SECOND = timedelta(seconds=1)


def decimal_arg(value: float) -> str:
    """A number as a plain decimal (0.00001, not ``1e-05``): the module reads
    both, but servers older than this module's exponent support do not, and
    the plain form reads the same in logs and ``MONITOR``."""
    if isinstance(value, int):
        return str(value)
    return format(Decimal(repr(value)), "f")


def duration_arg(value: Duration) -> str:
    """A duration as an argument: strings go as they are (the server reads the
    units), numbers as seconds, timedeltas as milliseconds (the module's
    resolution; a fraction is rounded by the server)."""
    if isinstance(value, str):
        return value
    if isinstance(value, timedelta):
        micros = value // timedelta(microseconds=1)
        sign, micros = ("-", -micros) if micros < 0 else ("", micros)
        whole, frac = divmod(micros, 1000)
        return f"{sign}{whole}.{frac:03d}ms" if frac else f"{sign}{whole}ms"
    return decimal_arg(value)


def duration_ms(value: Duration) -> float | None:
    """A duration in milliseconds, or None when it is not one the module
    would read (the server then refuses the command, with its reason)."""
    if isinstance(value, timedelta):
        return value / timedelta(milliseconds=1)
    if isinstance(value, str):
        match = _DURATION.fullmatch(value)
        if match is None:
            return None
        unit = (match.group(2) or "s").lower()
        return float(match.group(1)) * _MS_PER_UNIT[unit]
    ms = float(value) * 1000
    return ms if math.isfinite(ms) else None


def block_ms(value: Duration) -> int:
    """``BLOCK``'s value: whole milliseconds, rounded up (a wait of 0.4 ms is
    1 ms, never the server's 0), and ``math.inf`` as the server's 0, no limit.

    Zero is refused: the server reads ``BLOCK 0`` as "no limit" where Python
    reads a timeout of 0 as "do not wait", so neither is guessed; leave
    ``block`` out not to wait. A negative or unreadable duration is refused
    here too, since the server would name milliseconds, not what was given.
    """
    if not isinstance(value, (str, timedelta)) and value == math.inf:
        return 0
    wait = duration_ms(value)
    if wait is None or wait <= 0:
        raise ValueError(
            f"block={value!r} must be a duration above 0 (seconds, a string such as "
            '"250ms", or a timedelta), or math.inf for no limit; leave block out not to wait'
        )
    return math.ceil(wait)


def ceil_seconds(delta: timedelta) -> int:
    """Whole seconds, rounded up: a client that waits that long is never early
    (HTTP's delay-seconds, as Retry-After and the RateLimit fields use)."""
    whole, part = divmod(delta, _SECOND)  # no negation: -timedelta.max overflows
    return whole + (1 if part else 0)


#: The longest duration a timedelta holds (999,999,999 days, some 2.7
#: million years), in milliseconds: a longer one is clamped to it, never an
#: OverflowError (the server takes windows and refill times far longer).
MAX_TIMEDELTA_MS = timedelta.max // timedelta(milliseconds=1)


def ms(value: float) -> timedelta:
    """A millisecond count (a reply's, a limit's window) as a duration;
    clamped to `timedelta.max`, past which no client waits anyway."""
    if value >= MAX_TIMEDELTA_MS:
        return timedelta.max
    if value <= -MAX_TIMEDELTA_MS:
        return -timedelta.max
    return timedelta(milliseconds=value)


def check_count(what: str, value: object) -> int:
    """`value` if it is a whole number of at least 1, else a clear error
    (a bool is refused: ``True`` is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__} ({value!r})")
    if value < 1:
        raise ValueError(f"{what} must be at least 1, not {value}")
    return value


def check_rate(what: str, value: object) -> float:
    """`value` if it is a positive finite int or float (a Decimal or a
    string is refused by name, rather than failing later in arithmetic)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{what} must be an int or a float (per second), not {type(value).__name__} "
            f"({value!r}); e.g. float(value)"
        )
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a finite number above 0, not {value!r}")
    return float(value)


def check_duration(what: str, value: object) -> float:
    """`value`'s milliseconds if it is a duration the module reads and above
    zero, else an error naming the forms it takes."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, timedelta)):
        raise TypeError(
            f'{what} must be seconds (int or float), a string such as "250ms", "60s", '
            f'"1m", "1h", "1d", or a timedelta; not {type(value).__name__} ({value!r})'
        )
    wait = duration_ms(value)
    if wait is None or wait <= 0:
        raise ValueError(
            f"{what}={value!r} is not a duration above 0 the module reads: seconds, a string "
            'such as "250ms", "60s", "1m", "1h", "1d" (no space), or a timedelta'
        )
    return wait
