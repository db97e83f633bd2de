"""``RL.INFO``: what a key holds, read the same under RESP2 and RESP3.

The module replies field/value pairs: a flat array under RESP2, a map under
RESP3. Its decimal values (rates, tokens) are doubles, which RESP2 carries
as strings and RESP3 as numbers. Both shapes become one ``KeyInfo`` whose
values are ``int``, ``float``, ``str`` or lists of them, so code reading it
does not depend on the protocol the connection happens to speak.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from .units import ms

#: A field's value: integers, decimals, strings, and lists (a concurrency
#: key's ``leases``: ``[id, end_ms]`` pairs).
InfoValue = int | float | str | list[Any]


@dataclass(frozen=True)
class KeyInfo:
    """A key's algorithm, parameters as last used, state, and timing.

    ``fields`` holds every field the module sent, by name (per algorithm:
    see the module's README, ``RL.INFO``); the common ones are also
    attributes.
    """

    algorithm: str
    #: What a request of 1 could take now.
    remaining: int
    #: How long until the key is back to its fresh state.
    reset_after: timedelta
    #: How long until the key expires.
    ttl: timedelta
    fields: Mapping[str, InfoValue]
    #: When the key's latest penalty (``PENALTY``) ends or ended, on the
    #: server's clock (UTC); None for a key that never had one. A key keeps
    #: it once the penalty is over, so it may be in the past.
    penalty_until: datetime | None = None


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [_text(v) for v in value]
    return value


def _number_or_text(value: str) -> float | str:
    """RESP2 sends a double as a string: make it the number RESP3 gives."""
    try:
        return float(value)
    except ValueError:
        return value


def parse_info(reply: Any) -> KeyInfo | None:
    if reply is None:
        return None
    if isinstance(reply, Mapping):
        pairs = list(reply.items())
    else:
        pairs = list(zip(reply[0::2], reply[1::2], strict=True))
    fields: dict[str, InfoValue] = {}
    for name, value in pairs:
        name, value = _text(name), _text(value)
        if name != "algorithm" and isinstance(value, str):
            value = _number_or_text(value)
        fields[name] = value
    return KeyInfo(
        algorithm=str(fields["algorithm"]),
        remaining=_int(fields, "remaining"),
        reset_after=ms(_int(fields, "reset_after_ms")),
        ttl=ms(_int(fields, "ttl_ms")),
        fields=fields,
        penalty_until=(
            _EPOCH + ms(_int(fields, "penalty_until_ms")) if "penalty_until_ms" in fields else None
        ),
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _int(fields: Mapping[str, InfoValue], name: str) -> int:
    value = fields.get(name)
    if not isinstance(value, int):
        raise ValueError(f"RL.INFO replied {name} = {value!r}, not an integer")
    return value
