"""The leased global limit (`GlobalLimit`): processes sharing one key stay
within the bound, batches follow demand, unspent quota comes back, and a
Redis that stops answers with the fail mode."""

from __future__ import annotations

import itertools
import multiprocessing
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from multiprocessing.connection import Connection

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redis_ratelimit import (
    FixedWindow,
    GlobalLimit,
    Limit,
    RateLimiter,
    SlidingCounter,
    Stats,
    TokenBucket,
)
from redis_ratelimit.global_limit import _Core, refund, upto

from .servers import Server

#: Each process's allowed requests, as (before, after) wall times, and its counters.
Results = list[tuple[list[tuple[float, float]], Stats]]


def _worker(port: int, key: str, limit: Limit, seconds: float, out: Connection) -> None:
    """Asks as fast as it can for `seconds`; sends back (before, after) wall
    times of each allowed request, and the counters."""
    client = redis.Redis(port=port)
    gl = GlobalLimit(client, key, limit, max_lease=MAX_LEASE)
    times: list[tuple[float, float]] = []
    end = time.time() + seconds
    while True:
        before = time.time()
        if before >= end:
            break
        if gl.allow():
            times.append((before, time.time()))
        else:
            time.sleep(0.0005)
    gl.close()
    out.send((times, gl.stats()))
    out.close()


MAX_LEASE = 0.5


def _share(r: redis.Redis, key: str, limit: Limit, procs: int, seconds: float) -> Results:
    """`procs` processes, each with its own GlobalLimit of `limit` on `key`."""
    port = r.connection_pool.connection_kwargs["port"]
    ctx = multiprocessing.get_context("fork")
    pipes, workers = [], []
    for _ in range(procs):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_worker, args=(port, key, limit, seconds, send))
        p.start()
        pipes.append(recv)
        workers.append(p)
    results: Results = [pipe.recv() for pipe in pipes]
    for p in workers:
        p.join(10)
    return results


def test_processes_sharing_a_fixed_window_never_exceed_it(r: redis.Redis) -> None:
    limit = 300
    results = _share(r, "g:fw", FixedWindow(limit, 1), procs=4, seconds=2.5)
    definite: Counter[int] = Counter()
    straddling = 0
    for times, _ in results:
        for before, after in times:
            if int(before) == int(after):
                definite[int(before)] += 1
            else:
                straddling += 1
    total = sum(len(times) for times, _ in results)
    # A unit is spent only in the window that granted it: no window holds more.
    assert max(definite.values()) <= limit, definite
    assert straddling <= total // 100
    for times, stats in results:
        assert stats.spent == len(times)
    spent = sum(stats.spent for _, stats in results)
    calls = sum(stats.calls for _, stats in results)
    assert all(stats.refunds_lost == 0 and stats.held == 0 for _, stats in results)
    # Demand far above the limit: each window is used (at least half of it),
    # with far fewer calls than requests.
    full_windows = len(definite) - 2
    assert spent >= full_windows * limit // 2
    assert calls < spent


def test_processes_sharing_a_token_bucket_stay_within_the_bound(r: redis.Redis) -> None:
    capacity, rate, seconds = 200, 400.0, 2.0
    t0 = time.time()
    results = _share(r, "g:tb4", TokenBucket(capacity, rate), procs=3, seconds=seconds)
    span = max(after for times, _ in results for _, after in times) - t0
    allowed = sum(len(times) for times, _ in results)
    # The bound: capacity + rate x (T + 2 x max_lease).
    assert allowed <= capacity + rate * (span + 2 * MAX_LEASE)
    # And what the server kept: every grant not refunded was spent.
    for times, stats in results:
        assert stats.spent == len(times)
        assert stats.granted == stats.spent + stats.refunded + stats.refund_declined
        assert stats.refunds_lost == 0
    # Demand far above the rate: most of the allowance is used.
    assert allowed >= (capacity + rate * seconds) * 0.7, [s for _, s in results]


def test_batches_follow_demand(r: redis.Redis) -> None:
    # Counts, not times: 120 requests 5 ms apart, then 200,000 back to back.
    # A loaded machine stretches both phases but changes no claim below.
    with GlobalLimit(r, "g:tb", TokenBucket(1_000_000, 1_000_000), interval=0.02) as gl:
        for _ in range(120):  # about 200 a second (fewer when sleeps run late)
            gl.allow()
            time.sleep(0.005)
        slow = gl.stats()
        for _ in range(200_000):  # as fast as it goes
            gl.allow()
        fast = gl.stats()
    slow_batch = slow.granted / slow.calls
    fast_calls = fast.calls - slow.calls
    fast_batch = (fast.granted - slow.granted) / fast_calls
    # A batch is two intervals of demand: ~8 units at 200 a second; back to
    # back, even a process given 5% of a core makes 20,000+ checks a second,
    # 800+ a batch: the batches grew with demand, far past 5-fold.
    assert fast_batch > 5 * slow_batch, (slow, fast)
    # Each call brought quota for many checks (never a call per request).
    assert fast.spent - slow.spent > 20 * fast_calls, fast
    # The limit was never reached: no request was denied by it. (How many
    # found nothing held while a batch was on its way depends on Redis's
    # round trip against the demand: `test_core_batches_follow_demand`.)
    assert fast.denied == 0


class _Driven:
    """A `_Core` on a clock the test moves (1 s from 1000.0), doing what
    `GlobalLimit`'s thread does when its plan says (or at the next request
    once woken). Its grants and refunds are asked of the real server, and
    each comes back at the moment it is asked (no round trip on the clock)."""

    def __init__(
        self, limiter: RateLimiter, key: str, limit: Limit, *, interval: float = 0.02, seed: int = 0
    ) -> None:
        self.now = 1000.0
        self.limiter, self.key, self.limit = limiter, key, limit
        self.core = _Core(
            limit,
            max_lease=0.5,
            interval=interval,
            idle=None,
            max_batch=None,
            fail_open=False,
            clock=lambda: self.now,
            uniform=random.Random(seed).random,
        )
        self.woken = False
        self.core.wake = self._wake
        self.due = self.now
        #: Each grant call: (clock, asked, granted, by the loop).
        self.asks: list[tuple[float, int, int, bool]] = []

    def _wake(self) -> None:
        self.woken = True

    def fetch(self, amount: int, loop: bool) -> None:
        start = self.core.call_start()
        grant = self.limiter.run(upto(self.key, self.limit, amount))
        self.asks.append((self.now, amount, grant.granted, loop))
        for back, at in self.core.call_done(grant, amount, start, loop):
            self.give(back, at)

    def give(self, amount: int, at_ms: int | None = None) -> None:
        back = self.limiter.run(refund(self.key, self.limit, amount, at_ms))
        self.core.refund_done(amount, back)

    def tick(self) -> None:
        if not (self.woken or self.now >= self.due):
            return
        self.woken = False
        plan = self.core.next_plan(lambda: None)
        assert plan is not None
        for amount, at in plan.refunds:
            self.give(amount, at)
        if plan.want:
            self.fetch(plan.want, True)
        self.due = self.now + plan.wait

    def requests(self, rate: float, seconds: float, every: Callable[[], None] | None = None) -> int:
        """`rate` requests a second of the clock for `seconds`; the allowed
        count. `every` runs before each request."""
        allowed = 0
        for _ in range(round(rate * seconds)):
            self.now += 1 / rate
            if every is not None:
                every()
            self.tick()
            answer = self.core.admit(1)
            if answer is None:  # nothing held, no demand seen: asks itself
                self.fetch(1, False)
                answer = self.core.after_first(1)
            allowed += answer
        return allowed


def test_core_batches_follow_demand(limiter: RateLimiter) -> None:
    # The same as test_batches_follow_demand on the core's own clock: 200
    # requests a second for 0.6 s, then 100,000 a second for 0.6 s.
    d = _Driven(limiter, "g:core-batches", TokenBucket(1_000_000, 1_000_000))
    d.requests(200, 0.6)
    slow, slow_asks = d.core.snapshot(), len(d.asks)
    d.requests(100_000, 0.6)
    fast = d.core.snapshot()
    slow_batches = [a[2] for a in d.asks[1:slow_asks]]  # the first is a request's own 1
    fast_batches = [a[2] for a in d.asks[slow_asks:]]
    fast_calls = fast.calls - slow.calls
    # Two intervals of demand, asked when less than one is held: 200 x 0.04
    # = 8 units at most, then 100,000 x 0.04 - 2,000 held = 2,000 at least
    # once the estimate has caught up (the last 20 calls, of the last 0.4 s).
    assert max(slow_batches) <= 8, slow_batches
    assert min(fast_batches[-20:]) >= 2_000, fast_batches
    # About one call per interval (0.6 / 0.02 = 30), never one per request
    # (60,000). Until the demand is next estimated (half an interval after
    # the rise), the loop, woken on each pass, asks the old small batch
    # each time: here one per request for 10 ms, some 30 calls more.
    assert fast_calls <= 30 + 40, (fast_calls, fast_batches)
    # The demand rose 500-fold at once: a few requests found nothing held
    # until the batches caught up (at most one interval's worth, 2,000 of
    # 60,000), none was denied by the limit.
    assert fast.starved - slow.starved <= 2_000, fast
    assert fast.denied == 0, fast


def test_core_scarce_until_a_whole_grant_leaves_as_much_again(limiter: RateLimiter) -> None:
    # The fair split's exit: a whole grant that emptied the limit says
    # nothing about the next ask (a token bucket refilled since the last
    # one); out of scarcity only when what it left is at least what was asked.
    key, bucket = "g:core-exit", TokenBucket(100, 0.001)
    core = _Driven(limiter, key, bucket).core
    now = core.clock()

    def grant(amount: int) -> None:
        core.granted(limiter.run(upto(key, bucket, amount)), amount, now, True)

    limiter.run(upto(key, bucket, 75))  # 25 left
    grant(30)  # 25 of 30: short
    assert core.scarce
    limiter.run(refund(key, bucket, 20))  # 20 left
    grant(20)  # whole, and nothing left
    assert core.scarce
    limiter.run(refund(key, bucket, 100))  # full: 100
    grant(40)  # whole, 60 left, less than asked twice over but at least 40
    assert not core.scarce
    grant(60)  # whole, nothing left: out of scarcity it stays out
    assert not core.scarce


def test_core_scarce_asks_at_a_cadence_with_a_random_part(limiter: RateLimiter) -> None:
    # A process asking 2,000 a second of a bucket that refills 1,000 a
    # second (the test refunds 1 unit each ms of the clock into a bucket
    # whose own rate is nil): every grant is short, the process is scarce
    # throughout, and runs dry between asks.
    key, bucket = "g:core-cadence", TokenBucket(1000, 0.001)
    limiter.run(upto(key, bucket, 900))  # 100 left, then only what the test puts back
    d = _Driven(limiter, key, bucket, interval=0.02, seed=7)
    d.requests(2000, 1.0, every=lambda: d.give(1) if round(d.now * 2000) % 2 == 0 else None)
    assert d.core.scarce
    loop = [a for a in d.asks if a[3]]
    first = next(i for i, a in enumerate(loop) if a[2] < a[1])
    times = [a[0] for a in loop[first:]]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(gaps) >= 20, d.asks
    # Never sooner than one interval after the last ask, though dry between:
    # no early ask (to the request clock's step, 0.5 ms).
    assert min(gaps) >= 0.02 - 1e-9, gaps
    # ... never later than two (plus one step), and not at a fixed cadence:
    # one interval and a uniform part of another, from the seeded draw.
    assert max(gaps) < 0.04 + 0.0005 + 1e-9, gaps
    assert max(gaps) - min(gaps) > 0.01, gaps
    # Each ask while scarce is one interval of demand (2,000 x 0.02 = 40; a
    # few more for the estimate, made of whole requests), not two (80).
    assert all(a[1] <= 44 for a in loop[first + 1 :]), loop


def test_unspent_quota_comes_back_on_close(r: redis.Redis, limiter: RateLimiter) -> None:
    bucket = TokenBucket(10_000, 0.001)
    gl = GlobalLimit(r, "g:close", bucket, max_lease=5.0, idle=5.0)
    for _ in range(300):
        assert gl.allow()
        time.sleep(0.001)
    held = gl.stats()
    assert held.granted > held.spent  # some held when it closes
    gl.close()
    after = gl.stats()
    assert after.held == 0
    assert after.refunded == after.granted - after.spent
    assert limiter.peek("g:close", bucket).remaining == 10_000 - after.spent


def test_unspent_quota_comes_back_when_the_lease_ends(r: redis.Redis, limiter: RateLimiter) -> None:
    bucket = TokenBucket(10_000, 0.001)
    with GlobalLimit(r, "g:lease", bucket, max_lease=0.3, idle=10.0) as gl:
        for _ in range(200):
            gl.allow()
            time.sleep(0.001)
        time.sleep(0.6)
        stats = gl.stats()
        assert stats.held == 0
        assert stats.refunded == stats.granted - stats.spent > 0
        assert limiter.peek("g:lease", bucket).remaining == 10_000 - stats.spent


def test_unspent_quota_comes_back_when_demand_drops(r: redis.Redis) -> None:
    with GlobalLimit(r, "g:idle", TokenBucket(10_000, 0.001), max_lease=5.0, idle=0.1) as gl:
        for _ in range(200):
            gl.allow()
            time.sleep(0.001)
        time.sleep(0.4)
        stats = gl.stats()
        assert stats.held == 0
        assert stats.refunded == stats.granted - stats.spent > 0


def _fill_then_stop(fail_open: bool) -> tuple[list[bool], GlobalLimit, int]:
    server = Server()
    try:
        client = redis.Redis(port=server.port, retry=Retry(NoBackoff(), 0))
        gl = GlobalLimit(
            client, "g:down", TokenBucket(100_000, 100_000), fail_open=fail_open, idle=5.0
        )
        for _ in range(300):
            assert gl.allow()
            time.sleep(0.001)
        held = gl.stats().held
    finally:
        server.stop()
    answers = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.3:
        answers.append(gl.allow())
        time.sleep(0.001)
    return answers, gl, held


def test_redis_stopped_spends_what_is_held_then_fails_closed() -> None:
    answers, gl, held = _fill_then_stop(fail_open=False)
    stats = gl.stats()
    # What was held is spent first; then denied, as the rule says.
    assert answers[: min(held, len(answers))] == [True] * min(held, len(answers))
    assert answers[-1] is False
    assert stats.failed_closed > 0 and stats.failed_open == 0
    gl.close()
    # Nothing held can be refunded: retried once, then counted, not lost silently.
    assert gl.stats().refunds_lost == gl.stats().granted - gl.stats().spent - gl.stats().refunded


def test_redis_stopped_fails_open() -> None:
    answers, gl, _ = _fill_then_stop(fail_open=True)
    gl.close()
    assert all(answers)
    assert gl.stats().failed_open > 0


def test_redis_hung_never_holds_a_request_and_recovers() -> None:
    server = Server()
    try:
        client = redis.Redis(port=server.port, retry=Retry(NoBackoff(), 0))
        gl = GlobalLimit(
            client,
            "g:hung",
            TokenBucket(100_000, 100_000),
            fail_open=False,
            timeout=0.05,
            cooldown=0.2,
            idle=5.0,
        )
        for _ in range(200):
            assert gl.allow()
            time.sleep(0.001)
        server.process.send_signal(signal.SIGSTOP)  # hung: connections open, no answers
        slowest = 0.0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.4:
            before = time.monotonic()
            gl.allow()
            slowest = max(slowest, time.monotonic() - before)
            time.sleep(0.001)
        hung = gl.stats()
        # Requests are answered here, never wait on Redis; once what was held
        # is spent, denied (fail closed).
        assert slowest < 0.04, slowest  # a wait on Redis would take its timeout, 0.05
        assert hung.failed_closed > 0
        server.process.send_signal(signal.SIGCONT)
        t1 = time.monotonic()
        while time.monotonic() - t1 < 0.6:
            gl.allow()
            time.sleep(0.001)
        back = gl.stats()
        assert back.granted > hung.granted  # the breaker closed again: leasing resumed
        assert back.spent > hung.spent
        gl.close()
    finally:
        server.process.send_signal(signal.SIGCONT)
        server.stop()


def _paced(
    port: int, key: str, limit: Limit, demand: float, start: float, seconds: float, out: Connection
) -> None:
    """Tries `demand` requests a second from wall time `start` for
    `seconds` (each at its time, allowed or not, as a server under load
    would); sends back the wall times of the allowed ones and the counters."""
    client = redis.Redis(port=port)
    gl = GlobalLimit(client, key, limit, max_lease=MAX_LEASE)
    times: list[tuple[float, float]] = []
    time.sleep(max(0.0, start - time.time()))
    attempted = 0
    while True:
        due = start + attempted / demand
        now = time.time()
        if now >= start + seconds:
            break
        if due > now:
            time.sleep(due - now)
            continue
        attempted += 1
        before = time.time()
        if gl.allow():
            times.append((before, time.time()))
    gl.close()
    out.send((times, gl.stats()))
    out.close()


def _share_paced(
    r: redis.Redis, key: str, limit: Limit, demands: list[float], seconds: float
) -> Results:
    """One process per demand, all starting together, each with its own
    GlobalLimit of `limit` on `key`."""
    port = r.connection_pool.connection_kwargs["port"]
    ctx = multiprocessing.get_context("fork")
    start = time.time() + 0.5
    pipes, workers = [], []
    for demand in demands:
        recv, send = ctx.Pipe(duplex=False)
        args = (port, key, limit, demand, start, seconds, send)
        p = ctx.Process(target=_paced, args=args)
        p.start()
        pipes.append(recv)
        workers.append(p)
    results: Results = [pipe.recv() for pipe in pipes]
    for p in workers:
        p.join(10)
    return results


def _assert_fair(results: Results) -> None:
    allowed = [len(times) for times, _ in results]
    mean = sum(allowed) / len(allowed)
    assert all(abs(a - mean) <= 0.25 * mean for a in allowed), allowed


def test_equal_processes_split_a_token_bucket_fairly(r: redis.Redis) -> None:
    # Four processes of equal demand, together twice the rate.
    results = _share_paced(r, "g:fair-tb", TokenBucket(1000, 1000), [500.0] * 4, seconds=5)
    _assert_fair(results)
    # Short grants put each in the fair split: at most one ask per interval.
    for _, stats in results:
        assert stats.calls <= 5 / 0.025 + 20, stats


def test_equal_processes_split_a_fixed_window_fairly(r: redis.Redis) -> None:
    # A guard, not a test of the fair rule's refinements: paced equal
    # processes split a fixed window evenly with or without them (this passes
    # with the exit rule and the random part both taken out). Those are
    # tested on the core's own clock: test_core_scarce_*.
    results = _share_paced(r, "g:fair-fw", FixedWindow(1000, 1), [500.0] * 4, seconds=5)
    _assert_fair(results)


def test_processes_sharing_a_sliding_counter_stay_within_its_estimate(r: redis.Redis) -> None:
    # The server grants only what fits its estimate (the oldest sub-window
    # weighted by the share of it still inside the window), a refund leaves
    # the grant's sub-window, and a lease ends with its sub-window: so the
    # same estimate made of what was *spent* never passes the limit either.
    limit, precision = 1000, 4
    results = _share_paced(
        r, "g:sc", SlidingCounter(limit, 1, precision=precision), [500.0] * 4, seconds=4
    )
    sub = 1.0 / precision
    spent: list[float] = []
    straddling = 0
    for times, stats in results:
        assert stats.spent == len(times) and stats.refunds_lost == 0
        for before, after in times:
            if int(before / sub) == int(after / sub):
                spent.append(after)
            else:
                straddling += 1
    spent.sort()
    assert straddling <= len(spent) // 100
    counts: Counter[int] = Counter()
    worst = 0.0
    for t in spent:
        k = int(t / sub)
        counts[k] += 1
        elapsed = t / sub - k  # share of sub-window k gone by t
        estimate: float = sum(counts[i] for i in range(k - precision + 1, k + 1))
        estimate += counts[k - precision] * (1 - elapsed)
        worst = max(worst, estimate)
    assert worst <= limit, worst
    # Demand is twice the limit: most of it is used.
    assert len(spent) >= limit * 4 * 0.7, len(spent)
