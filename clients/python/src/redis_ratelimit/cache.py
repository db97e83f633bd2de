"""The local denial cache: a denial remembered until its retry time, so
the same request is denied again without a round trip to Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from datetime import timedelta

from .decision import Decision

#: How long a denial is answered locally at most, in seconds, whatever its
#: wait: the stored state can change behind this process's back (an
#: operator's `reset`, ``DEL``, ``FLUSHALL``; another process's reset clears
#: only its own cache), so after this long Redis is asked again. It bounds
#: how long another process keeps denying after a reset; a flood from one
#: identity still costs each process at most one round trip per interval.
DEFAULT_MAX_AGE_S = 1.0


class DenialCache:
    """Denials answered locally: a set of keys denied with a wait is denied
    again, without a round trip, until that wait has passed or `max_age_s`
    (`DEFAULT_MAX_AGE_S`), whichever comes first (only this process's own
    requests change the state as far as it knows; an operator's reset is
    seen after `max_age_s` at most, or at once through `forget`). Bounded:
    the oldest entries go first when it is full. Thread-safe."""

    def __init__(self, size: int = 10_000, max_age_s: float = DEFAULT_MAX_AGE_S) -> None:
        self.size = size
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._entries: dict[Hashable, tuple[float, float, Decision]] = {}

    def put(self, key: Hashable, decision: Decision) -> None:
        retry = decision.retry_after
        if retry is None or retry <= timedelta(0):
            return  # can never pass (answered by Redis: cheap and rare), or not a wait
        now = time.monotonic()
        with self._lock:
            if len(self._entries) >= self.size:
                self._entries = {k: v for k, v in self._entries.items() if v[1] > now}
                while len(self._entries) >= self.size:
                    del self._entries[next(iter(self._entries))]
            until = now + min(retry.total_seconds(), self.max_age_s)
            self._entries[key] = (now, until, decision)

    def get(self, key: Hashable) -> Decision | None:
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            stored, until, decision = entry
            if now >= until:
                del self._entries[key]
                return None
        return decision.aged(timedelta(seconds=now - stored))

    def forget(self, gone: Callable[[Hashable], bool]) -> int:
        """Drops the entries whose key `gone` says are reset; how many."""
        with self._lock:
            keys = [key for key in self._entries if gone(key)]
            for key in keys:
                del self._entries[key]
        return len(keys)
