"""A leased global limit: one Redis key shared by many processes, quota
taken in batches (``COST n UPTO``) and spent locally, what is not spent given
back (``RL.REFUND ... AT granted_at_ms``).

One key is served by one Redis thread; a limit shared by a whole fleet
(at most N requests a second to a payments provider, across every app
server) can outgrow it. A `GlobalLimit` asks Redis only every ~10-50 ms per
process under load, and answers each request from what it holds.

**The bound.** Quota is debited at Redis when a batch is granted, and spent
here at most ``max_lease`` later; what is left then is refunded. So:

- ``FixedWindow``: a lease ends before the window it was granted in
  (``min(max_lease, reset_after)``, timed from before the request was sent),
  so every unit is spent inside the window that counted it: allowed per
  window <= ``limit``. Overage 0.
- ``TokenBucket`` and ``GCRA``: allowed in any span T <= ``capacity +
  rate x (T + 2 x max_lease)``: one ``max_lease`` because a unit is spent
  up to that long after Redis took it, one because a refund comes back at
  most that late (docs/commands.md, "What the limit still promises").
- ``SlidingCounter``: what the server counted in any window <= ``limit``
  (refunds are exact), spent at most ``max_lease`` later: allowed in any
  span W <= the server's allowance for ``W + max_lease``.

A process killed with quota in hand loses at most what it held (it is
neither spent nor refunded). Counters (`GlobalLimit.stats`) say what was
granted, spent, refunded and lost, so a run can report what it did.

**Failures.** When Redis is down or slow, requests are answered from what is
held; once that is spent, the rule's ``fail_open`` says (allow or deny),
behind the same breaker as the web middleware (`web.guard`). A refund that
fails is retried once; then it is counted (``refunds_lost``) and logged.
"""

from __future__ import annotations

import bisect
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster

from .commands import Command, Key, decision_from
from .limits import GCRA, FixedWindow, Limit, SlidingCounter, TokenBucket
from .web.guard import DEFAULT_COOLDOWN, DEFAULT_TIMEOUT, SyncGuard

log = logging.getLogger(__name__)

#: The algorithms that offer ``COST n UPTO`` and ``RL.REFUND``.
LEASABLE = (TokenBucket, GCRA, FixedWindow, SlidingCounter)

#: A fixed-window lease ends this long before the window does, so a unit
#: is never spent after the window that counted it.
_WINDOW_MARGIN_S = 0.005


@dataclass(frozen=True)
class Grant:
    """A reply to ``COST n UPTO``: how much was taken, when (server ms), and
    the five integers as a Decision."""

    granted: int
    granted_at_ms: int
    allowed: bool
    remaining: int
    retry_after_ms: int
    reset_after_ms: int


def upto(key: Key, limit: Limit, amount: int) -> Command[Grant]:
    """``RL.<ALGORITHM> key <params> COST amount UPTO``."""

    def parse(reply: Any) -> Grant:
        d = decision_from(reply[:5])
        return Grant(
            granted=int(reply[5]),
            granted_at_ms=int(reply[6]),
            allowed=d.allowed,
            remaining=d.remaining,
            retry_after_ms=int(reply[3]),
            reset_after_ms=int(reply[4]),
        )

    return Command(limit.command, (key, *limit.params(), "COST", amount, "UPTO"), parse)


def refund(key: Key, limit: Limit, amount: int, at_ms: int | None = None) -> Command[int]:
    """``RL.REFUND key <ALGORITHM> <params> amount [AT at_ms]``: the units
    given back."""
    words: list[Any] = [key, limit.word, *limit.params(), amount]
    if at_ms is not None:
        words += ["AT", at_ms]
    return Command("RL.REFUND", tuple(words), lambda reply: int(reply))


@dataclass
class Stats:
    """What a `GlobalLimit` did, in units of quota."""

    #: Units Redis granted.
    granted: int = 0
    #: Units spent from grants (allowed requests' costs).
    spent: int = 0
    #: Units Redis took back (a refund's reply).
    refunded: int = 0
    #: Units sent back that Redis did not take (a window that had ended, a
    #: full bucket): quota lost, never overage.
    refund_declined: int = 0
    #: Units whose refund failed twice: logged, never sent.
    refunds_lost: int = 0
    #: Requests allowed without quota because Redis failed (``fail_open``).
    failed_open: int = 0
    #: Requests denied because Redis failed (fail closed).
    failed_closed: int = 0
    #: Requests denied because the limit had nothing left.
    denied: int = 0
    #: Requests denied because nothing was held here although the limit
    #: may have had some (demand rose faster than the batches): under-use.
    starved: int = 0
    #: Grant requests sent to Redis (refunds not included).
    calls: int = 0
    #: Units held right now.
    held: int = 0


@dataclass
class _Lease:
    amount: int
    granted_at_ms: int
    #: time.monotonic() after which it is no longer spent.
    expires: float


class GlobalLimit:
    """One limit on one Redis `key`, shared by every process that makes a
    `GlobalLimit` of it, decided locally from quota leased in batches.

    ``allow(cost=1)`` answers True or False without a round trip while
    quota is held. A background thread keeps quota ahead of demand: it
    sizes each batch from this process's recent demand so that it asks
    Redis about every `interval` seconds (default 25 ms) under load, and
    refills when what is held would last less than one `interval`, so no
    request waits on a refill it could have foreseen. (Only the first
    request, with nothing held and no demand seen yet, asks Redis on its
    own path.) A lease lives at most `max_lease` seconds (for a
    `FixedWindow`, also never past its window); then, after `idle` seconds
    without a request, and on `close()`, what was not spent is refunded.

    The bound on what all processes together allow, per algorithm, is in
    this module's docstring and in docs/clients.md.

    `fail_open`, `timeout` and `cooldown` mean what they mean for the web
    middleware's rules: each call to Redis has `timeout` seconds; after a
    failure Redis is not asked for `cooldown` seconds; with nothing held
    and Redis failing, requests are allowed (True) or denied (False).
    `max_batch` caps one grant (default: a quarter of the limit's quota,
    so one process does not take all of a limit others share).
    """

    def __init__(
        self,
        redis_client: redis.Redis | RedisCluster,
        key: Key,
        limit: Limit,
        *,
        max_lease: float = 1.0,
        interval: float = 0.025,
        idle: float | None = None,
        max_batch: int | None = None,
        fail_open: bool = True,
        timeout: float = DEFAULT_TIMEOUT,
        cooldown: float = DEFAULT_COOLDOWN,
    ) -> None:
        if not isinstance(limit, LEASABLE):
            names = ", ".join(c.__name__ for c in LEASABLE)
            raise TypeError(f"a GlobalLimit leases from {names}, not {type(limit).__name__}")
        if not 0 < interval < max_lease:
            raise ValueError("interval must be above 0 and below max_lease")
        self.key = key
        self.limit = limit
        self.max_lease = max_lease
        self.interval = interval
        self.idle = idle if idle is not None else max(0.1, 4 * interval)
        self.max_batch = max_batch if max_batch is not None else max(1, limit.quota // 4)
        self.fail_open = fail_open
        self._guard = SyncGuard(redis_client, timeout, cooldown)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._fetching = threading.Lock()
        # Live leases, the one to end first first (spent first).
        self._leases: list[_Lease] = []
        # Leases ended and not yet refunded (the background thread sends them).
        self._expired: list[_Lease] = []
        self._held = 0
        self._stats = Stats()
        # Demand: units asked for since the last estimate, and the estimate
        # (units a second, an exponentially weighted average).
        self._asked = 0
        self._rate = 0.0
        self._last_estimate = time.monotonic()
        self._last_request = 0.0
        # Nothing left at Redis until then (monotonic): do not ask before.
        self._empty_until = 0.0
        self._failing = False
        self._retries: list[tuple[int, int]] = []
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="GlobalLimit", daemon=True)
        self._thread.start()

    # The request path ------------------------------------------------------

    def allow(self, cost: int = 1) -> bool:
        """True when the request may go ahead (its `cost` spent from the
        quota held); never waits on Redis once this process has seen demand."""
        now = time.monotonic()
        with self._lock:
            self._asked += cost
            self._last_request = now
            if self._take(cost, now):
                if self._held < self._low_water():
                    self._wake.notify()
                return True
            first = self._rate == 0.0 and not self._failing and now >= self._empty_until
            self._wake.notify()
        if first and self._fetching.acquire(blocking=False):
            # Nothing held and no demand seen yet: nothing could have
            # foreseen this request, so it asks Redis itself, once.
            try:
                self._fetch(max(cost, 1))
            finally:
                self._fetching.release()
            with self._lock:
                if self._take(cost, time.monotonic()):
                    return True
        with self._lock:
            if self._failing:
                if self.fail_open:
                    self._stats.failed_open += 1
                    return True
                self._stats.failed_closed += 1
                return False
            if time.monotonic() < self._empty_until:
                self._stats.denied += 1
            else:
                self._stats.starved += 1
            return False

    def _take(self, cost: int, now: float) -> bool:
        """Spends `cost` from live leases, oldest first (under the lock)."""
        self._drop_expired_locked(now)
        if self._held < cost:
            return False
        left = cost
        while left:
            lease = self._leases[0]
            used = min(left, lease.amount)
            lease.amount -= used
            left -= used
            if lease.amount == 0:
                del self._leases[0]
        self._held -= cost
        self._stats.spent += cost
        return True

    def _drop_expired_locked(self, now: float) -> list[_Lease]:
        gone: list[_Lease] = []
        while self._leases and self._leases[0].expires <= now:
            lease = self._leases.pop(0)
            self._held -= lease.amount
            gone.append(lease)
        self._expired.extend(gone)
        return gone

    def _demand(self, now: float) -> float:
        """Units a second: the average, or what has been asked since it was
        last taken when that is more (demand rising)."""
        elapsed = now - self._last_estimate
        current = self._asked / elapsed if elapsed >= 0.002 else 0.0
        return max(self._rate, current)

    def _low_water(self) -> float:
        """Refill when what is held would last less than one interval."""
        return self._demand(time.monotonic()) * self.interval

    # The background thread ---------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                demand = self._demand(now)
                self._estimate(now)
                demand = max(demand, self._rate)
                self._drop_expired_locked(now)
                expired, self._expired = self._expired, []
                # Demand dropped: no request for `idle` seconds.
                idle = now - self._last_request >= self.idle
                if idle and self._held:
                    expired += self._leases
                    self._leases = []
                    self._held = 0
                want = 0
                if (
                    not idle
                    and demand > 0
                    and self._held < demand * self.interval
                    and now >= self._empty_until
                ):
                    # Enough for two intervals: one to use, one to refill in.
                    want = math.ceil(demand * 2 * self.interval) - self._held
                    want = max(1, min(want, self.max_batch))
                retries, self._retries = self._retries, []
            for lease in expired:
                if lease.amount:
                    self._refund(lease.amount, lease.granted_at_ms, retry=True)
            for amount, at in retries:
                self._refund(amount, at, retry=False)
            if want:
                self._fetch(want)
            with self._lock:
                if self._closed:
                    return
                self._wake.wait(self.interval / 2)

    def _estimate(self, now: float) -> None:
        elapsed = now - self._last_estimate
        if elapsed < self.interval / 2:
            return
        sample = self._asked / elapsed
        self._rate = sample if self._rate == 0.0 else 0.5 * self._rate + 0.5 * sample
        if self._rate < 0.5 / self.max_lease and self._asked == 0:
            self._rate = 0.0  # demand gone
        self._asked = 0
        self._last_estimate = now

    def _fetch(self, amount: int) -> None:
        """Asks Redis for up to `amount`, and holds what comes."""
        start = time.monotonic()
        with self._lock:
            self._stats.calls += 1
        try:
            grant = self._guard.run(upto(self.key, self.limit, amount))
        except (redis.ConnectionError, redis.TimeoutError) as error:
            with self._lock:
                if not self._failing:
                    log.warning("GlobalLimit %r: Redis failed (%s)", self.key, error)
                self._failing = True
            return
        lease_s = self.max_lease
        if isinstance(self.limit, FixedWindow):
            lease_s = min(lease_s, grant.reset_after_ms / 1000 - _WINDOW_MARGIN_S)
        with self._lock:
            self._failing = False
            self._stats.granted += grant.granted
            closed = self._closed
            if closed:
                pass  # close() has already given back what was held: this goes back below
            elif grant.granted and lease_s > 0:
                lease = _Lease(grant.granted, grant.granted_at_ms, start + lease_s)
                bisect.insort(self._leases, lease, key=lambda x: x.expires)
                self._held += grant.granted
            elif grant.granted:
                self._expired.append(_Lease(grant.granted, grant.granted_at_ms, start))
            # Less than asked: the limit is spent for now. Ask again no
            # sooner than it can grant 1, nor than half an interval.
            if grant.granted == 0:
                wait = max(grant.retry_after_ms / 1000, self.interval / 2)
                self._empty_until = time.monotonic() + wait
            elif grant.granted < amount:
                self._empty_until = time.monotonic() + self.interval / 2
        if closed and grant.granted:
            self._refund(grant.granted, grant.granted_at_ms, retry=True)
            with self._lock:
                retries, self._retries = self._retries, []
            for again, at in retries:
                self._refund(again, at, retry=False)

    def _refund(self, amount: int, at_ms: int, *, retry: bool) -> None:
        try:
            back = self._guard.run(refund(self.key, self.limit, amount, at_ms))
        except (redis.ConnectionError, redis.TimeoutError) as error:
            with self._lock:
                if retry:
                    self._retries.append((amount, at_ms))
                    return
                self._stats.refunds_lost += amount
            log.warning(
                "GlobalLimit %r: could not refund %d unit(s) granted at %d ms (%s); lost",
                self.key,
                amount,
                at_ms,
                error,
            )
            return
        with self._lock:
            self._stats.refunded += back
            self._stats.refund_declined += amount - back

    # The rest ----------------------------------------------------------------

    def stats(self) -> Stats:
        """A copy of the counters."""
        with self._lock:
            copy = Stats(**vars(self._stats))
            copy.held = self._held
            return copy

    def close(self) -> None:
        """Stops the background thread and refunds what is held (a failed
        refund is retried once at once, then counted and logged)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._wake.notify()
        self._thread.join()
        with self._lock:
            gone = self._expired + self._leases
            self._expired, self._leases, self._held = [], [], 0
            retries, self._retries = self._retries, []
        for lease in gone:
            if lease.amount:
                self._refund(lease.amount, lease.granted_at_ms, retry=True)
        retries, self._retries = retries + self._retries, []
        for amount, at in retries:
            self._refund(amount, at, retry=False)

    def __enter__(self) -> GlobalLimit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
