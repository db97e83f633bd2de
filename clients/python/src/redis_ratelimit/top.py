"""``RL.TOP``: the keys a server denied most, read into typed entries, and
the lists of a cluster's primaries merged into one.

The module replies a flat array, ``key, count`` pairs (``key, count,
error`` triples with ``WITHERROR``), most denied first, under RESP2 and
RESP3 alike. Each server counts only the denials it answered, so a
cluster's answer is every primary's list, merged here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TopEntry:
    """One of the keys denied most.

    ``count`` is never below the key's true number of denials and exceeds it
    by at most ``error`` (the module's Space-Saving sketch): the true count
    lies between ``count - error`` and ``count``. ``error`` is None unless
    asked for (``with_error=True``).
    """

    #: The key's name, decoded as UTF-8 (bytes that are not UTF-8 are kept
    #: as surrogates: ``key.encode(errors="surrogateescape")`` gives them back).
    key: str
    count: int
    error: int | None = None


def _key(name: Any) -> str:
    if isinstance(name, bytes):
        return name.decode(errors="surrogateescape")
    return str(name)


def _entries(reply: Any, with_error: bool) -> list[TopEntry]:
    """One server's flat reply as entries, in its order."""
    step = 3 if with_error else 2
    return [
        TopEntry(
            key=_key(reply[i]),
            count=int(reply[i + 1]),
            error=int(reply[i + 2]) if with_error else None,
        )
        for i in range(0, len(reply), step)
    ]


def parse_top(reply: Any, count: int, with_error: bool) -> list[TopEntry]:
    """One server's reply, or a cluster's (replies by node name) merged."""
    if isinstance(reply, Mapping):
        return merge_top([_entries(r, with_error) for r in reply.values()], count)
    return _entries(reply, with_error)


def merge_top(lists: list[list[TopEntry]], count: int) -> list[TopEntry]:
    """Several servers' lists as one: a key's counts (and errors) added up,
    most first, then surest (smaller error), then by name; the first
    `count`.

    In a cluster a key is served, so counted, by one primary: each primary's
    first `count` hold every key that can be among the first `count` of all,
    and a count keeps its own node's bound. A key that moved between
    primaries (resharding) was counted on both; when it is listed on only
    one, its count there is all this merge sees of it.
    """
    merged: dict[str, TopEntry] = {}
    for entries in lists:
        for e in entries:
            seen = merged.get(e.key)
            if seen is None:
                merged[e.key] = e
            else:
                error = None if e.error is None or seen.error is None else seen.error + e.error
                merged[e.key] = TopEntry(e.key, seen.count + e.count, error)
    ranked = sorted(
        merged.values(),
        key=lambda e: (-e.count, e.error or 0, e.key.encode(errors="surrogateescape")),
    )
    return ranked[:count]
