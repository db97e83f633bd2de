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
- ``SlidingCounter``: a grant is counted in the sub-window of its moment
  and only if it fits the estimate then; a refund leaves that sub-window
  exactly; a lease ends with that sub-window. So the estimate made of what
  was spent never passes ``limit``: overage 0 against the algorithm (whose
  own estimate error is unchanged).

A process killed with quota in hand loses at most what it held (it is
neither spent nor refunded). Counters (`GlobalLimit.stats`) say what was
granted, spent, refunded and lost, so a run can report what it did.

**Fair split.** When the limit runs short, processes of equal demand get
equal shares (`_Core`): a process whose grant came back short asks at most
once per interval (plus a random part of one), for one interval of its own
demand.

**Failures.** When Redis is down or slow, requests are answered from what is
held; once that is spent, the rule's ``fail_open`` says (allow or deny),
behind the same breaker as the web middleware (`web.guard`). A refund that
fails is retried once; then it is counted (``refunds_lost``) and logged.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from .commands import Command, Key, decision_from
from .decision import Decision
from .kinds import require_async, require_sync
from .limits import GCRA, FixedWindow, Limit, SlidingCounter, TokenBucket
from .web.guard import DEFAULT_COOLDOWN, DEFAULT_TIMEOUT, AsyncGuard, SyncGuard

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


@dataclass
class _Plan:
    """What the refill loop does next (found under the lock, done outside)."""

    #: (units, granted_at_ms) to refund, then the refunds' last tries.
    refunds: list[tuple[int, int]]
    retries: list[tuple[int, int]]
    want: int
    #: Seconds until the loop looks again, unless woken.
    wait: float


def _sub_window_end_ms(limit: SlidingCounter, at_ms: int) -> int:
    """The end (Unix ms) of the sliding counter's sub-window holding
    `at_ms`: sub-windows are ``window / precision`` long, from the epoch."""
    window = int(limit.window_ms() or 1)
    precision = limit.precision or 1
    k = at_ms * precision // window
    return -(-((k + 1) * window) // precision)


class _Core:
    """The state a leased limit keeps, and every decision on it: what a
    request takes, when to ask Redis and for how much, what a grant, a
    failure and a refund change. No I/O: `GlobalLimit` (a thread) and
    `AsyncGlobalLimit` (an asyncio task) drive it.

    The fair split. A process is *scarce* once a grant comes back short
    (less than asked) and until one comes back whole. While scarce it asks at
    a fixed cadence, at most once per `interval` (never sooner because it ran
    dry), and at most ``ceil(demand x interval)``, its own measured demand
    (requests attempted, allowed or not) over one interval. Processes of
    equal demand then ask for equal amounts equally often, whatever their
    speed or luck. Out of scarcity, batches are demand-sized (two intervals'
    worth, asked when less than one interval's worth is held).
    """

    def __init__(
        self,
        limit: Limit,
        *,
        max_lease: float,
        interval: float,
        idle: float | None,
        max_batch: int | None,
        fail_open: bool,
        clock: Callable[[], float] = time.monotonic,
        uniform: Callable[[], float] = random.random,
    ) -> None:
        if not isinstance(limit, LEASABLE):
            names = ", ".join(c.__name__ for c in LEASABLE)
            raise TypeError(f"a GlobalLimit leases from {names}, not {type(limit).__name__}")
        if not 0 < interval < max_lease:
            raise ValueError("interval must be above 0 and below max_lease")
        self.limit = limit
        self.max_lease = max_lease
        self.interval = interval
        self.idle = idle if idle is not None else max(0.1, 4 * interval)
        self.max_batch = max_batch if max_batch is not None else max(1, limit.quota // 4)
        self.fail_open = fail_open
        #: Seconds, monotonic (every time the core reads itself; tests drive it).
        self.clock = clock
        #: Uniform in [0, 1): the fair split's random part (tests seed it).
        self.uniform = uniform
        self.lock = threading.Lock()
        #: Called (under the lock) when the refill loop should look now.
        self.wake: Any = lambda: None
        # Live leases, the one to end first first (spent first).
        self.leases: list[_Lease] = []
        # The lease the last request was spent from (`give_back`).
        self.spent_from: _Lease | None = None
        # Leases ended and not yet refunded (the refill loop sends them).
        self.expired: list[_Lease] = []
        self.held = 0
        self.stats = Stats()
        # Demand: units asked for since the last estimate, and the estimate
        # (units a second, an exponentially weighted average).
        self.asked = 0
        self.rate = 0.0
        self.last_estimate = clock()
        self.last_request = 0.0
        # Nothing left at Redis until then (monotonic): do not ask before.
        self.empty_until = 0.0
        # The fair split: scarce since a short grant; no ask before next_ask.
        self.scarce = False
        self.next_ask = 0.0
        # The last grant's word on the limit, for a decision's fields.
        self.last_remaining = limit.quota
        # A batch the refill loop asked for has come.
        self.warm = False
        self.last_reset_ms = 0
        # Refill below this (units, from the loop's last look); woken since.
        self.low_water = 0.0
        self.woken = False
        self.failing = False
        self.retries: list[tuple[int, int]] = []
        self.closed = False
        self.fetching = False

    # The request path (callers hold the lock) --------------------------------

    def request(self, cost: int, now: float) -> bool | None:
        """True: `cost` spent from what is held. None: nothing held and no
        demand seen yet, so nothing could have foreseen this request: the
        caller asks Redis itself (once), then `take`s. False: see `refuse`."""
        self.asked += cost
        self.last_request = now
        if self.take(cost, now):
            # Below one interval's worth (as of the loop's last look): wake
            # the loop once (a thread switch costs some 20 us in CPython: not
            # on every request), unless it is scarce and keeps its cadence.
            if self.held < self.low_water and not self.woken and not self.scarce:
                self.woken = True
                self.wake()
            return True
        if not self.scarce and not self.failing and now >= self.empty_until:
            self.wake()  # starved: demand rose faster than the batches
        # No demand seen, or the refill loop's first batch not yet here.
        cold = self.rate == 0.0 or not self.warm
        if cold and not self.failing and now >= self.empty_until and not self.fetching:
            self.fetching = True
            return None
        return False

    def take(self, cost: int, now: float) -> bool:
        """Spends `cost` from live leases, the first to end first."""
        self.drop_expired(now)
        if self.held < cost:
            return False
        left = cost
        while left:
            lease = self.leases[0]
            used = min(left, lease.amount)
            lease.amount -= used
            left -= used
            if lease.amount == 0:
                del self.leases[0]
        self.spent_from = lease
        self.held -= cost
        self.stats.spent += cost
        return True

    def give_back(self, cost: int, now: float) -> None:
        """Returns `cost` just spent (a request another limit then denied)
        to the lease it was last spent from, if that is still live."""
        self.drop_expired(now)
        lease = self.spent_from
        if lease is None or lease.expires <= now:
            return  # that lease has ended (and been refunded): lost, never overage
        if lease.amount == 0:
            bisect.insort(self.leases, lease, key=lambda x: x.expires)
        lease.amount += cost
        self.held += cost
        self.stats.spent -= cost

    def refuse(self, now: float) -> bool:
        """The answer when nothing is held: the fail mode while Redis fails,
        else a denial (counted as `denied` when Redis said the limit is
        spent, `starved` when this process only had not asked in time)."""
        if self.failing:
            if self.fail_open:
                self.stats.failed_open += 1
                return True
            self.stats.failed_closed += 1
            return False
        if now < self.empty_until or self.scarce:
            self.stats.denied += 1
        else:
            self.stats.starved += 1
        return False

    def retry_after_s(self, now: float) -> float:
        """About how long until this process may hold quota again."""
        return max(self.interval, self.empty_until - now, self.next_ask - now)

    def drop_expired(self, now: float) -> None:
        while self.leases and self.leases[0].expires <= now:
            lease = self.leases.pop(0)
            self.held -= lease.amount
            self.expired.append(lease)

    def demand(self, now: float) -> float:
        """Units a second: the average, or what has been asked since it was
        last taken when that is more (demand rising)."""
        elapsed = now - self.last_estimate
        current = self.asked / elapsed if elapsed >= 0.002 else 0.0
        return max(self.rate, current)

    # The refill loop (callers hold the lock) ---------------------------------

    def plan(self, now: float) -> _Plan:
        demand = self.demand(now)
        self.estimate(now)
        demand = max(demand, self.rate)
        self.low_water = demand * self.interval
        self.woken = False
        self.drop_expired(now)
        refunds, self.expired = self.expired, []
        # Demand dropped: no request for `idle` seconds.
        idle = now - self.last_request >= self.idle
        if idle and self.held:
            refunds += self.leases
            self.leases = []
            self.held = 0
        want = 0
        wait = self.interval / 2
        if not idle and demand > 0:
            if now < self.empty_until:
                wait = min(wait, self.empty_until - now)
            elif self.scarce:
                # A fixed cadence: one ask per interval, one interval's demand.
                if now >= self.next_ask:
                    want = math.ceil(demand * self.interval) - self.held
                    # One interval and a random part of another: asks that
                    # kept one order would split a refilling bucket by the
                    # gaps between them (the ask after the longest gap gets
                    # most), the same processes every time.
                    self.next_ask = now + self.interval * (1 + self.uniform())
                wait = min(wait, max(0.0, self.next_ask - now))
            elif self.held < demand * self.interval:
                # Enough for two intervals: one to use, one to refill in.
                want = math.ceil(demand * 2 * self.interval) - self.held
                self.next_ask = now + self.interval
        if want > 0:
            want = min(want, self.max_batch)
        retries, self.retries = self.retries, []
        sends = [(lease.amount, lease.granted_at_ms) for lease in refunds if lease.amount]
        return _Plan(sends, retries, max(0, want), wait)

    def estimate(self, now: float) -> None:
        elapsed = now - self.last_estimate
        if elapsed < self.interval / 2:
            return
        sample = self.asked / elapsed
        self.rate = sample if self.rate == 0.0 else 0.5 * self.rate + 0.5 * sample
        if self.rate < 0.5 / self.max_lease and self.asked == 0:
            self.rate = 0.0  # demand gone
        self.asked = 0
        self.last_estimate = now

    def lease_seconds(self, grant: Grant) -> float:
        """How long a grant may be spent: `max_lease`, and never past the
        window (fixed window) or sub-window (sliding counter) that counted it,
        timed from before the request was sent."""
        lease_s = self.max_lease
        if isinstance(self.limit, FixedWindow):
            lease_s = min(lease_s, grant.reset_after_ms / 1000 - _WINDOW_MARGIN_S)
        elif isinstance(self.limit, SlidingCounter):
            end_ms = _sub_window_end_ms(self.limit, grant.granted_at_ms)
            lease_s = min(lease_s, (end_ms - grant.granted_at_ms) / 1000 - _WINDOW_MARGIN_S)
        return lease_s

    def granted(self, grant: Grant, amount: int, start: float, loop: bool) -> _Lease | None:
        """Holds what a grant of up to `amount` (asked at `start`, by the
        refill `loop` or a request) brought; returns it when it must go back
        at once (closed meanwhile)."""
        self.failing = False
        self.warm = self.warm or (loop and grant.granted > 0)
        self.stats.granted += grant.granted
        self.last_remaining = grant.remaining
        self.last_reset_ms = grant.reset_after_ms
        # Scarce on a short grant; out of it on a whole one that left at
        # least as much again at Redis (a whole grant that emptied the limit
        # says nothing about the next: see `_Core`).
        if grant.granted < amount:
            self.scarce = True
        elif grant.remaining >= amount:
            self.scarce = False
        back: _Lease | None = None
        lease_s = self.lease_seconds(grant)
        if self.closed:
            # close() has already given back what was held: this goes back too.
            back = _Lease(grant.granted, grant.granted_at_ms, start)
        elif grant.granted and lease_s > 0:
            lease = _Lease(grant.granted, grant.granted_at_ms, start + lease_s)
            bisect.insort(self.leases, lease, key=lambda x: x.expires)
            self.held += grant.granted
        elif grant.granted:
            self.expired.append(_Lease(grant.granted, grant.granted_at_ms, start))
        if grant.granted == 0:
            # Spent at Redis: no ask before it can grant 1 (a fixed window's
            # end), nor before half an interval.
            wait = max(grant.retry_after_ms / 1000, self.interval / 2)
            self.empty_until = self.clock() + wait
        return back if back is not None and back.amount else None

    def failed(self, key: Key, error: Exception) -> None:
        if not self.failing:
            log.warning("GlobalLimit %r: Redis failed (%s)", key, error)
        self.failing = True

    def refund_failed(self, amount: int, at_ms: int, retry: bool) -> bool:
        """Queues a failed refund for one more try; True when it is lost."""
        if retry:
            self.retries.append((amount, at_ms))
            return False
        self.stats.refunds_lost += amount
        return True

    def refunded(self, amount: int, back: int) -> None:
        self.stats.refunded += back
        self.stats.refund_declined += amount - back

    def closing(self) -> tuple[list[_Lease], list[tuple[int, int]]]:
        """Everything held and owed, to refund on close."""
        gone = [x for x in self.expired + self.leases if x.amount]
        self.expired, self.leases, self.held = [], [], 0
        retries, self.retries = self.retries, []
        return gone, retries

    def snapshot(self) -> Stats:
        copy = Stats(**vars(self.stats))
        copy.held = self.held
        return copy

    def decision(self, allowed: bool, now: float) -> Decision:
        """A decision for the web middleware's fields: the limit, what the
        last grant left at Redis plus what this process holds (an estimate:
        other processes hold some too), and, when denied, about when this
        process may hold quota again."""
        return Decision(
            allowed=allowed,
            limit=self.limit.quota,
            # While Redis fails, what it holds is unknown: only what is
            # held here may be counted on.
            remaining=self.held if self.failing else max(0, self.last_remaining) + self.held,
            retry_after=timedelta(0) if allowed else timedelta(seconds=self.retry_after_s(now)),
            reset_after=timedelta(milliseconds=max(0, self.last_reset_ms)),
            policy=self.limit.policy(),
        )

    # The drivers' steps (each takes the lock; no I/O) -------------------------
    # `GlobalLimit` and `AsyncGlobalLimit` differ only in how they wait on
    # Redis (a thread, an asyncio task): everything around each call is here.

    def admit(self, cost: int) -> bool | None:
        """A request's answer from what is held (True or False), or None:
        the caller asks Redis itself (once), then answers with `after_first`."""
        now = self.clock()
        with self.lock:
            answer = self.request(cost, now)
            if answer is None:
                return None
            return answer or self.refuse(now)

    def after_first(self, cost: int) -> bool:
        """The answer to a request that asked Redis itself (see `admit`)."""
        now = self.clock()
        with self.lock:
            self.fetching = False
            return self.take(cost, now) or self.refuse(now)

    def end_first(self) -> None:
        """A request's own ask failed before `after_first` (an exception)."""
        with self.lock:
            self.fetching = False

    def decide(self, allowed: bool) -> Decision:
        with self.lock:
            return self.decision(allowed, self.clock())

    def put_back(self, cost: int) -> None:
        with self.lock:
            self.give_back(cost, self.clock())

    def next_plan(self, clear: Any) -> _Plan | None:
        """The refill loop's next pass (None once closed); `clear` resets
        the loop's wake-up under the lock, so that no wake is lost."""
        with self.lock:
            if self.closed:
                return None
            plan = self.plan(self.clock())
            clear()
            return plan

    def is_closed(self) -> bool:
        with self.lock:
            return self.closed

    def close(self) -> bool:
        """Marks it closed; False when it already was."""
        with self.lock:
            if self.closed:
                return False
            self.closed = True
            return True

    def call_start(self) -> float:
        """A grant call is about to be sent: counted; its start time."""
        with self.lock:
            self.stats.calls += 1
        return self.clock()

    def call_failed(self, key: Key, error: Exception) -> None:
        with self.lock:
            self.failed(key, error)

    def call_done(
        self, grant: Grant, amount: int, start: float, loop: bool
    ) -> list[tuple[int, int]]:
        """Holds what a grant brought; what must be refunded at once."""
        with self.lock:
            back = self.granted(grant, amount, start, loop)
        return [] if back is None else [(back.amount, back.granted_at_ms)]

    def close_refunds(self) -> list[tuple[int, int]]:
        """On close: everything held and not yet refunded, to send."""
        with self.lock:
            gone, retries = self.closing()
            self.retries = retries + self.retries
        return [(lease.amount, lease.granted_at_ms) for lease in gone]

    def take_retries(self) -> list[tuple[int, int]]:
        """The refunds that failed once, for their last try."""
        with self.lock:
            retries, self.retries = self.retries, []
        return retries

    def refund_error(
        self, key: Key, amount: int, at_ms: int, retry: bool, error: Exception
    ) -> None:
        """A refund failed: queued for one more try, or counted and logged."""
        with self.lock:
            lost = self.refund_failed(amount, at_ms, retry)
        if lost:
            log.warning(
                "GlobalLimit %r: could not refund %d unit(s) granted at %d ms (%s); lost",
                key,
                amount,
                at_ms,
                error,
            )

    def refund_done(self, amount: int, back: int) -> None:
        with self.lock:
            self.refunded(amount, back)


#: What a grant or a refund may meet: Redis down or slow, or a server that
#: refuses the command (the module not loaded, an ACL without the command,
#: a key of another type). Each is logged once and answered as held quota
#: and the fail mode say; none may end the refill thread or reach a request.
_FAILURES = (redis.ConnectionError, redis.TimeoutError, redis.ResponseError)


#: The Redis client a driver takes (sync or asyncio).
_Client = TypeVar("_Client")


class _Front(Generic[_Client]):
    """What both drivers show, the same for both: the constructor, the
    settings, `stats()` and `give_back()`, over a `_Core`; each driver adds
    its I/O (`_attach`: its client, its breaker, its refill loop)."""

    def __init__(
        self,
        redis_client: _Client,
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
        self._core = core = _Core(
            limit,
            max_lease=max_lease,
            interval=interval,
            idle=idle,
            max_batch=max_batch,
            fail_open=fail_open,
        )
        self.key = key
        self.limit = limit
        self.max_lease = max_lease
        self.interval = interval
        self.idle = core.idle
        self.max_batch = core.max_batch
        self.fail_open = fail_open
        self._attach(redis_client, timeout, cooldown)

    def _attach(self, redis_client: _Client, timeout: float, cooldown: float) -> None:
        raise NotImplementedError

    def give_back(self, cost: int = 1) -> None:
        """Undoes an allowed `cost` that was not used after all (another
        limit denied the request): it is held again, not refunded."""
        self._core.put_back(cost)

    def stats(self) -> Stats:
        """A copy of the counters."""
        with self._core.lock:
            return self._core.snapshot()


class GlobalLimit(_Front["redis.Redis | RedisCluster"]):
    """One limit on one Redis `key`, shared by every process that makes a
    `GlobalLimit` of it, decided locally from quota leased in batches.

    ``allow(cost=1)`` answers True or False without a round trip while quota
    is held. A background thread keeps quota ahead of demand: it sizes each
    batch from this process's recent demand so that it asks Redis about
    every `interval` seconds (default 25 ms) under load, and refills when
    what is held would last less than one `interval`, so no request waits on
    a refill it could have foreseen. (Only the first requests, with nothing
    held before the thread's first batch has come, ask Redis on their own
    path, one at a time.) When the limit runs short, processes share it by
    the fair split (`_Core`): one ask per interval, each for one interval of
    its own demand. A lease lives at most `max_lease` seconds (for a
    `FixedWindow`, never past its window; for a `SlidingCounter`, never past
    the sub-window that counted it); then, after `idle` seconds without a
    request, and on `close()`, what was not spent is refunded.

    The bound on what all processes together allow, per algorithm, is in
    this module's docstring and in docs/clients.md.

    `fail_open`, `timeout` and `cooldown` mean what they mean for the web
    middleware's rules: each call to Redis has `timeout` seconds; after a
    failure Redis is not asked for `cooldown` seconds; with nothing held
    and Redis failing, requests are allowed (True) or denied (False).
    `max_batch` caps one grant (default: a quarter of the limit's quota,
    so one process does not take all of a limit others share).

    The web middleware takes it as one of a rule's limits
    (``limits=[TokenBucket(10, 1), payments]``): see `redis_ratelimit.web.Rule`.
    """

    def _attach(
        self, redis_client: redis.Redis | RedisCluster, timeout: float, cooldown: float
    ) -> None:
        require_sync(redis_client, "GlobalLimit", "AsyncGlobalLimit")
        self._guard = SyncGuard(redis_client, timeout, cooldown)
        self._event = threading.Event()
        self._core.wake = self._wake
        self._thread = threading.Thread(target=self._run, name="GlobalLimit", daemon=True)
        self._thread.start()

    def _wake(self) -> None:
        if not self._event.is_set():
            self._event.set()

    # The request path ------------------------------------------------------

    def allow(self, cost: int = 1) -> bool:
        """True when the request may go ahead (its `cost` spent from the
        quota held); never waits on Redis once this process has seen demand."""
        answer = self._core.admit(cost)
        if answer is not None:
            return answer
        # Nothing held and no demand seen yet: nothing could have foreseen
        # this request, so it asks Redis itself, once.
        try:
            self._fetch(max(cost, 1), loop=False)
        except BaseException:
            self._core.end_first()
            raise
        return self._core.after_first(cost)

    def check(self, cost: int = 1) -> Decision:
        """`allow`, as a `Decision` (the web middleware's fields)."""
        return self._core.decide(self.allow(cost))

    # The background thread ---------------------------------------------------

    def _run(self) -> None:
        core = self._core
        while (plan := core.next_plan(self._event.clear)) is not None:
            self._refund_all(plan.refunds, plan.retries)
            if plan.want:
                self._fetch(plan.want)
            if core.is_closed():
                return
            self._event.wait(plan.wait)

    def _fetch(self, amount: int, *, loop: bool = True) -> None:
        """Asks Redis for up to `amount`, and holds what comes."""
        start = self._core.call_start()
        try:
            grant = self._guard.run(upto(self.key, self.limit, amount))
        except _FAILURES as error:
            self._core.call_failed(self.key, error)
            return
        back = self._core.call_done(grant, amount, start, loop)
        if back:
            self._refund_all(back)
            self._refund_all([], self._core.take_retries())

    def _refund_all(
        self, sends: list[tuple[int, int]], last: Sequence[tuple[int, int]] = ()
    ) -> None:
        """Refunds `sends` (a failure is tried again later), then `last`
        (their last try: a failure is counted and logged)."""
        for amount, at in sends:
            self._refund(amount, at, retry=True)
        for amount, at in last:
            self._refund(amount, at, retry=False)

    def _refund(self, amount: int, at_ms: int, *, retry: bool) -> None:
        try:
            back = self._guard.run(refund(self.key, self.limit, amount, at_ms))
        except _FAILURES as error:
            self._core.refund_error(self.key, amount, at_ms, retry, error)
            return
        self._core.refund_done(amount, back)

    # The rest ----------------------------------------------------------------

    def close(self) -> None:
        """Stops the background thread and refunds what is held (a failed
        refund is retried once at once, then counted and logged)."""
        if not self._core.close():
            return
        self._event.set()
        self._thread.join()
        self._refund_all(self._core.close_refunds())
        self._refund_all([], self._core.take_retries())

    def __enter__(self) -> GlobalLimit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncGlobalLimit(_Front["redis.asyncio.Redis | AsyncRedisCluster"]):
    """`GlobalLimit` for asyncio (a ``redis.asyncio`` client): the same
    leases, bound, fair split and failures, refilled by an asyncio task
    instead of a thread.

    ``await allow(cost=1)``: a coroutine, so that the requests that must
    wait on Redis (the first ones, with nothing held before the refill
    task's first batch has come) can do so without blocking the event loop;
    every other call returns without suspending (no await reaches the loop
    while quota is held, or when it is denied). The refill task starts with the first `allow` (or
    ``async with``), on the running loop; `aclose()` stops it and refunds
    what is held.
    """

    def _attach(
        self, redis_client: redis.asyncio.Redis | AsyncRedisCluster, timeout: float, cooldown: float
    ) -> None:
        require_async(redis_client, "AsyncGlobalLimit", "GlobalLimit")
        self._guard = AsyncGuard(redis_client, timeout, cooldown)
        self._event: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._core.wake = self._wake

    def _wake(self) -> None:
        event = self._event
        if event is not None and not event.is_set():
            event.set()

    def _start(self) -> None:
        if self._task is None and not self._core.closed:
            self._event = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def allow(self, cost: int = 1) -> bool:
        """True when the request may go ahead (its `cost` spent from the
        quota held); awaits Redis only for the first requests, before the
        refill task's first batch has come."""
        if self._task is None:
            self._start()
        answer = self._core.admit(cost)
        if answer is not None:
            return answer
        try:
            await self._fetch(max(cost, 1), loop=False)
        except BaseException:
            self._core.end_first()
            raise
        return self._core.after_first(cost)

    async def check(self, cost: int = 1) -> Decision:
        """`allow`, as a `Decision` (the web middleware's fields)."""
        return self._core.decide(await self.allow(cost))

    async def _run(self) -> None:
        core = self._core
        event = self._event
        assert event is not None
        while (plan := core.next_plan(event.clear)) is not None:
            await self._refund_all(plan.refunds, plan.retries)
            if plan.want:
                await self._fetch(plan.want)
            if core.is_closed():
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(event.wait(), plan.wait)

    async def _fetch(self, amount: int, *, loop: bool = True) -> None:
        start = self._core.call_start()
        try:
            grant = await self._guard.run(upto(self.key, self.limit, amount))
        except _FAILURES as error:
            self._core.call_failed(self.key, error)
            return
        back = self._core.call_done(grant, amount, start, loop)
        if back:
            await self._refund_all(back)
            await self._refund_all([], self._core.take_retries())

    async def _refund_all(
        self, sends: list[tuple[int, int]], last: Sequence[tuple[int, int]] = ()
    ) -> None:
        for amount, at in sends:
            await self._refund(amount, at, retry=True)
        for amount, at in last:
            await self._refund(amount, at, retry=False)

    async def _refund(self, amount: int, at_ms: int, *, retry: bool) -> None:
        try:
            back = await self._guard.run(refund(self.key, self.limit, amount, at_ms))
        except _FAILURES as error:
            self._core.refund_error(self.key, amount, at_ms, retry, error)
            return
        self._core.refund_done(amount, back)

    async def aclose(self) -> None:
        """Stops the refill task and refunds what is held (a failed refund
        is retried once at once, then counted and logged)."""
        if not self._core.close():
            return
        task, self._task = self._task, None
        if task is not None:
            self._wake()
            with contextlib.suppress(asyncio.TimeoutError):  # then cancelled by wait_for
                await asyncio.wait_for(task, self._guard.timeout * 4 + 1)
        await self._refund_all(self._core.close_refunds())
        await self._refund_all([], self._core.take_retries())

    async def __aenter__(self) -> AsyncGlobalLimit:
        self._start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
