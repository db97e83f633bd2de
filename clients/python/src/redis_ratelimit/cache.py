"""The local denial cache: a denial remembered until its retry time, so
the same request is denied again without a round trip to Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from datetime import timedelta

from .decision import Decision


class DenialCache:
    """Denials answered locally: a set of keys denied with a wait is denied
    again, without a round trip, until that wait has passed (the stored
    state cannot allow it sooner: only this process's own requests could
    change it, and they are answered here). Bounded: the oldest entries go
    first when it is full. Thread-safe."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
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
            self._entries[key] = (now, now + retry.total_seconds(), decision)

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
